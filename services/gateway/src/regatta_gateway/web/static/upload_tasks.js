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

  // --- a chosen folder, packed as the tar.gz the CLI sends (ustar; gzip by the browser) --------------
  const BLOCK = 512;
  const encoder = new TextEncoder();

  function octal(header, offset, length, value) {
    header.set(encoder.encode(value.toString(8).padStart(length - 1, "0")), offset);
  }

  /** A ustar header, or null when the path does not fit ustar's 100 + 155 bytes. */
  function tarHeader(path, size) {
    const bytes = encoder.encode(path);
    let name = bytes;
    let prefix = new Uint8Array(0);
    if (bytes.length > 100) {
      const cut = path.lastIndexOf("/", 155);
      if (cut <= 0) return null;
      prefix = encoder.encode(path.slice(0, cut));
      name = encoder.encode(path.slice(cut + 1));
      if (prefix.length > 155 || name.length > 100 || name.length === 0) return null;
    }
    const header = new Uint8Array(BLOCK);
    header.set(name, 0);
    octal(header, 100, 8, 0o644);
    octal(header, 108, 8, 0);
    octal(header, 116, 8, 0);
    octal(header, 124, 12, size);
    octal(header, 136, 12, 0);
    header.fill(0x20, 148, 156); // the checksum counts its own field as spaces
    header[156] = 0x30; // "0": a regular file
    header.set(encoder.encode("ustar\u000000"), 257);
    header.set(prefix, 345);
    const sum = header.reduce((total, byte) => total + byte, 0);
    header.set(encoder.encode(sum.toString(8).padStart(6, "0") + "\u0000 "), 148);
    return header;
  }

  async function packFolder(files) {
    const parts = [];
    for (const file of files) {
      const path = file.webkitRelativePath || file.name;
      if (path.split("/").some((part) => part.startsWith("."))) continue; // .git, .DS_Store: no part of a task
      const header = tarHeader(path, file.size);
      if (!header) throw new Error(`${path}: the path is too long to pack here; use regatta task try`);
      parts.push(header, file);
      const pad = (BLOCK - (file.size % BLOCK)) % BLOCK;
      if (pad) parts.push(new Uint8Array(pad));
    }
    if (!parts.length) throw new Error("The folder holds no file to send.");
    parts.push(new Uint8Array(BLOCK * 2));
    const gzipped = new Blob(parts).stream().pipeThrough(new CompressionStream("gzip"));
    return new Response(gzipped).blob();
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
    const archive = form.elements.archive.files[0];
    const folder = form.elements.folder.files;
    if (!archive && !folder.length) {
      showError("Choose a .tar.gz of a task folder, or a task folder, first.", "archive");
      return;
    }
    errorBox.hidden = true;
    done.hidden = true;
    runLink.hidden = true;
    submitButton.disabled = true;
    let body = archive;
    if (!archive) {
      try {
        body = await packFolder(folder);
      } catch (error) {
        submitButton.disabled = false;
        showError(error.message, "folder");
        return;
      }
    }
    const result = await upload(body, form.elements.name.value.trim());
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
  form.elements.archive.addEventListener("change", () => { if (form.elements.archive.files.length) form.elements.folder.value = ""; });
  form.elements.folder.addEventListener("change", () => { if (form.elements.folder.files.length) form.elements.archive.value = ""; });
  dialog.addEventListener("close", () => {
    following += 1;
    errorBox.hidden = true;
    done.hidden = true;
    form.reset();
  });
})();
