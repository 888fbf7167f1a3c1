/* Benchmarks page: Add Benchmark dialog, and the sync progress / last runs updating live. */
"use strict";

(() => {
  const { api, errorText, poll, refreshRegions, toast } = Regatta;
  const TERMINAL = ["finished", "failed", "stopped"];

  // What the table shows, as one string: a change means the rows need re-rendering.
  const snapshot = (benchmarks) =>
    JSON.stringify(
      benchmarks.map((b) => [b.id, b.sync_status, b.synced_task_count, b.task_count, b.last_run_name, b.last_run_status, b.sync_error]),
    );
  let busy = false;
  const live = poll({
    async probe() {
      const result = await api("/api/v1/benchmarks?limit=200");
      if (!result.ok) return null;
      busy = result.data.benchmarks.some(
        (b) => ["pending", "syncing"].includes(b.sync_status) || (b.last_run_status && !TERMINAL.includes(b.last_run_status)),
      );
      return snapshot(result.data.benchmarks);
    },
    onChange: () => refreshRegions(["rows"]),
    // Fast while something moves; slower otherwise (a benchmark may be added from the CLI).
    every: () => (busy ? 1000 : 5000),
  });

  const dialog = document.getElementById("add-benchmark");
  const form = document.getElementById("add-benchmark-form");
  const errorBox = form.querySelector("[data-form-error]");

  function sourceType() {
    return form.querySelector("input[name=source_type]:checked").value;
  }
  function syncSourceFields() {
    for (const field of form.querySelectorAll("[data-source]")) field.hidden = field.dataset.source !== sourceType();
  }
  form.addEventListener("change", (event) => { if (event.target.name === "source_type") syncSourceFields(); });
  syncSourceFields();

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const type = sourceType();
    const value = (name) => form.elements[name].value.trim();
    const body = { source_type: type };
    if (type === "registry") {
      body.registry_path = value("registry_path");
      body.dataset = value("dataset");
    } else {
      body.path = value("path");
    }
    if (value("name")) body.name = value("name");
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    const result = await api("/api/v1/benchmarks", { method: "POST", body });
    button.disabled = false;
    if (!result.ok) {
      const issues = result.data.issues || (result.data.field ? [{ key: result.data.field, message: errorText(result) }] : []);
      for (const input of form.querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
      for (const issue of issues) form.querySelector(`[data-issue-key="${CSS.escape(issue.key)}"]`)?.setAttribute("aria-invalid", "true");
      errorBox.textContent = errorText(result, "Could not add the benchmark");
      errorBox.hidden = false;
      return;
    }
    errorBox.hidden = true;
    form.reset();
    syncSourceFields();
    dialog.close();
    toast("Benchmark added; its task list is syncing");
    await refreshRegions(["rows"]);
    live.now();
  });
  dialog.addEventListener("close", () => { errorBox.hidden = true; });
})();
