/* Benchmarks page: Add Benchmark dialog, and the sync progress / last runs updating live. */
"use strict";

(() => {
  const { api, el, errorText, poll, refreshRegions, toast } = Regatta;
  const { SYNCING, TERMINAL } = Regatta;

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
        (b) => SYNCING.includes(b.sync_status) || (b.last_run_status && !TERMINAL.includes(b.last_run_status)),
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
  const submitButton = form.querySelector("button[type=submit]");

  function sourceType() {
    return form.querySelector("input[name=source_type]:checked").value;
  }
  function syncSourceFields() {
    for (const field of form.querySelectorAll("[data-source]")) field.hidden = field.dataset.source !== sourceType();
  }
  form.addEventListener("change", (event) => { if (event.target.name === "source_type") syncSourceFields(); });
  syncSourceFields();

  // --- the default registry's datasets: search, and add one with a click ---------------------------
  const search = form.querySelector("[data-registry-search]");
  const list = form.querySelector("[data-registry-list]");
  const status = form.querySelector("[data-registry-status]");
  const unreachable = form.querySelector("[data-registry-unreachable]");
  const where = form.querySelector("[data-registry-where]");
  const manual = form.querySelector("[data-registry-manual]");
  const PAGE = 50;
  let asked = 0; // only the answer to the latest search is shown
  let searchTimer = null;

  function datasetItem(entry) {
    const tasks = `${entry.task_count} ${entry.task_count === 1 ? "task" : "tasks"}`;
    return el(
      "li",
      { class: "registry-item", dataset: { dataset: entry.dataset } },
      el(
        "div",
        { class: "registry-text" },
        el("div", { class: "registry-title" }, el("span", { class: "strong" }, entry.name), " ",
          el("span", { class: "badge badge-count" }, entry.version), " ", el("span", { class: "muted small nowrap" }, tasks)),
        entry.description
          ? el("p", { class: "registry-description muted small", title: entry.description }, entry.description)
          : null,
      ),
      el("button", {
        type: "button",
        class: "btn btn-small",
        "aria-label": `Add ${entry.dataset}`,
        "data-add-dataset": entry.dataset,
        text: "Add",
      }),
    );
  }

  async function loadDatasets() {
    const mine = ++asked;
    const query = search.value.trim();
    status.textContent = "Loading datasets…";
    status.hidden = false;
    const result = await api(`/api/v1/registry/datasets?limit=${PAGE}&q=${encodeURIComponent(query)}`);
    if (mine !== asked) return;
    if (!result.ok) {
      // Unreachable (or none configured): say so, and open the fields that need no registry list.
      list.hidden = true;
      status.hidden = true;
      unreachable.textContent = `${errorText(result, "The default registry cannot be reached")}. You can still give a registry URL or path below, or use the hub, a git repository or a folder.`;
      unreachable.hidden = false;
      where.textContent = "";
      manual.open = true;
      return;
    }
    const data = result.data;
    unreachable.hidden = true;
    if (data.registry === null) {
      list.hidden = true;
      status.textContent = "No default registry is configured. Give a registry URL or path below.";
      manual.open = true;
      return;
    }
    where.textContent = `Datasets of ${data.registry}`;
    list.replaceChildren(...data.datasets.map(datasetItem));
    list.hidden = data.datasets.length === 0;
    const count = `${data.total} ${data.total === 1 ? "dataset" : "datasets"}`;
    if (data.total === 0) status.textContent = query ? `No dataset matches “${query}”.` : "The default registry lists no dataset.";
    else if (data.total > data.datasets.length) status.textContent = `Showing ${data.datasets.length} of ${count}; search to narrow them down.`;
    else status.textContent = query ? `${count} ${data.total === 1 ? "matches" : "match"} “${query}”.` : count;
  }

  search.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(loadDatasets, 250);
  });
  // Enter in the search box searches now; it never submits the form.
  search.addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    event.preventDefault();
    clearTimeout(searchTimer);
    loadDatasets();
  });
  list.addEventListener("click", (event) => {
    const button = event.target.closest("[data-add-dataset]");
    if (button) add({ source_type: "registry", dataset: button.dataset.addDataset }, button);
  });

  // --- adding ----------------------------------------------------------------------------------------
  function bodyOf(type) {
    const value = (name) => form.elements[name].value.trim();
    const body = { source_type: type };
    if (type === "registry") {
      const registry = value("registry_path");
      if (registry) body[/^https?:\/\//i.test(registry) ? "registry_url" : "registry_path"] = registry;
      body.dataset = value("dataset");
    } else if (type === "hub") {
      body.dataset = value("hub_dataset");
    } else if (type === "git") {
      body.repo = value("repo");
      if (value("ref")) body.ref = value("ref");
      if (value("subdir")) body.path = value("subdir");
    } else {
      body.path = value("path");
    }
    return body;
  }

  function showError(result) {
    const issues = result.data.issues || (result.data.field ? [{ key: result.data.field, message: errorText(result) }] : []);
    for (const input of form.querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
    for (const issue of issues) {
      for (const input of form.querySelectorAll(`[data-issue-key="${CSS.escape(issue.key)}"]`)) {
        if (input.closest("[data-source]")?.hidden) continue;
        input.setAttribute("aria-invalid", "true");
        const folded = input.closest("details");
        if (folded) folded.open = true; // the field at fault is shown, not left folded away
      }
    }
    errorBox.textContent = errorText(result, "Could not add the benchmark");
    errorBox.hidden = false;
    errorBox.scrollIntoView({ block: "nearest" }); // a row's Add may be far above it in the dialog
  }

  async function add(body, button) {
    const name = form.elements.name.value.trim();
    if (name) body.name = name;
    button.disabled = true;
    const result = await api("/api/v1/benchmarks", { method: "POST", body });
    button.disabled = false;
    if (!result.ok) {
      showError(result);
      return;
    }
    errorBox.hidden = true;
    for (const input of form.querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
    form.reset();
    syncSourceFields();
    dialog.close();
    toast("Benchmark added; its task list is syncing");
    await refreshRegions(["rows"]);
    live.now();
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    add(bodyOf(sourceType()), submitButton);
  });
  // Each opening shows the registry as it is now (the gateway caches it; a failure is retried).
  new MutationObserver(() => { if (dialog.open) loadDatasets(); }).observe(dialog, { attributes: true, attributeFilter: ["open"] });
  dialog.addEventListener("close", () => { errorBox.hidden = true; });
})();
