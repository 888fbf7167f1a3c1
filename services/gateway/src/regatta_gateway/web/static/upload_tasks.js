/* Benchmarks page: Try Your Tasks. Uploads a task archive as a scratch benchmark
 * (POST /api/v1/benchmarks/uploads), follows its sync, then offers to start a run of it. */
"use strict";

(() => {
  const { errorText, refreshRegions } = Regatta;
  const dialog = document.getElementById("upload-tasks");
  const form = document.getElementById("upload-tasks-form");
  const errorBox = form.querySelector("[data-upload-error]");
  const done = form.querySelector("[data-upload-done]");
  const status = form.querySelector("[data-upload-status]");
  const runLink = form.querySelector("[data-upload-run]");
  const submitButton = form.querySelector("button[type=submit]");
  let following = 0; // only the latest upload's sync is followed

  function showError(message, field) {
    for (const input of form.querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
    const input = field && form.querySelector(`[data-issue-key="${CSS.escape(field)}"]`);
    (input || form.elements.archive).setAttribute("aria-invalid", "true");
    errorBox.textContent = message;
    errorBox.hidden = false;
  }

  // The archive goes as the raw body (not JSON, not a form): Regatta.api() sends JSON only.
  async function upload(file, name) {
    const query = name ? `?name=${encodeURIComponent(name)}` : "";
    let response;
    try {
      response = await fetch(`/api/v1/benchmarks/uploads${query}`, {
        method: "POST",
        credentials: "same-origin",
        headers: { Accept: "application/json", "Content-Type": "application/gzip", "X-Regatta-UI": "1" },
        body: file,
      });
    } catch (error) {
      return { ok: false, status: 0, data: { message: "The gateway did not answer (network error)." } };
    }
    let data = {};
    try { data = await response.json(); } catch (error) { data = {}; }
    return { ok: response.ok, status: response.status, data };
  }

  async function follow(benchmark, mine) {
    for (;;) {
      if (mine !== following) return;
      const result = await Regatta.api(`/api/v1/benchmarks/${encodeURIComponent(benchmark.id)}`);
      const detail = result.ok ? result.data.benchmark : null;
      if (detail && detail.sync_status === "ready") {
        const invalid = detail.tasks.filter((t) => t.invalid_reason);
        const count = `${detail.task_count} ${detail.task_count === 1 ? "task" : "tasks"}`;
        status.textContent = `Scratch benchmark “${detail.name}” is ready: ${count}.` +
          (invalid.length ? ` Not runnable: ${invalid.map((t) => t.invalid_reason).join("; ")}` : "");
        runLink.href = `/benchmarks/${encodeURIComponent(detail.id)}/runs/new`;
        runLink.hidden = detail.task_count === 0;
        await refreshRegions(["rows"]);
        return;
      }
      if (detail && detail.sync_status === "failed") {
        status.textContent = "";
        showError(`The tasks did not sync: ${detail.sync_error || "no reason given"}`, "archive");
        await refreshRegions(["rows"]);
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, 700));
    }
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const file = form.elements.archive.files[0];
    if (!file) {
      showError("Choose a .tar.gz of a task folder first.", "archive");
      return;
    }
    errorBox.hidden = true;
    done.hidden = true;
    runLink.hidden = true;
    submitButton.disabled = true;
    const result = await upload(file, form.elements.name.value.trim());
    submitButton.disabled = false;
    if (!result.ok) {
      showError(errorText(result, "Could not upload the tasks"), result.data.field);
      return;
    }
    for (const input of form.querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
    const again = result.data.existing ? " (the same files as before: its scratch benchmark again)" : "";
    status.textContent = `Uploaded “${result.data.name}”${again}; syncing its tasks…`;
    done.hidden = false;
    await refreshRegions(["rows"]);
    follow(result.data, ++following);
  });
  dialog.addEventListener("close", () => {
    following += 1;
    errorBox.hidden = true;
    done.hidden = true;
    form.reset();
  });
})();
