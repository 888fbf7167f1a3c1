/* Benchmark page: leaderboard sorting without reload (the sort stays in the URL), actions menu,
 * and the sync status / runs table updating live. */
"use strict";

(() => {
  const { api, errorText, poll, refreshRegions, toast } = Regatta;
  const { TERMINAL } = Regatta;
  const header = document.getElementById("benchmark-header");
  const benchmarkId = header.dataset.benchmarkId;

  // --- compare picks: the rows ticked in the leaderboard and the runs table stay ticked when those
  // regions are drawn again (a sort, a live update), even when ticked while the new rows were loading;
  // their forms sit outside the regions -----------------------------------------------------------
  const ticked = new Set();
  const pickKey = (box) => `${box.name}=${box.value}`;
  document.addEventListener("change", (event) => {
    const box = event.target.closest?.("input.pick");
    if (box) box.checked ? ticked.add(pickKey(box)) : ticked.delete(pickKey(box));
  });
  async function keepingPicks(redraw) {
    // Boxes the browser ticked again on its own (going back to the page) fire no change event.
    for (const box of document.querySelectorAll("input.pick:checked")) ticked.add(pickKey(box));
    await redraw();
    for (const box of document.querySelectorAll("input.pick")) box.checked = ticked.has(pickKey(box));
  }

  // --- leaderboard sort: ?sort= in the URL, rows re-rendered by the server from the same query ----
  async function showSort(sort, push, section = null) {
    const url = new URL(location.href);
    url.searchParams.set("sort", sort);
    if (push) history.pushState({ sort }, "", url);
    const region = document.querySelector('[data-region="leaderboard"]');
    region.setAttribute("aria-busy", "true");
    await keepingPicks(() => refreshRegions(["leaderboard"], url.pathname + url.search));
    region.dataset.sort = sort;
    region.removeAttribute("aria-busy");
    // Focus stays in the section whose header was clicked (every section has the same sort links).
    const within = section && region.querySelector(`[data-section="${CSS.escape(section)}"]`);
    (within || region).querySelector(`[data-sort-link="${sort}"]`)?.focus();
  }
  document.addEventListener("click", (event) => {
    const link = event.target.closest("[data-sort-link]");
    if (!link || event.ctrlKey || event.metaKey || event.shiftKey) return;
    event.preventDefault();
    showSort(link.dataset.sortLink, true, link.closest("[data-section]")?.dataset.section);
  });
  window.addEventListener("popstate", () => {
    showSort(new URL(location.href).searchParams.get("sort") || "pass_at_1", false);
  });

  // --- runs filters: a change reloads the list from its first page, the filters kept in the URL -----
  document.querySelector("[data-testid=runs-filters]")?.addEventListener("change", (event) => {
    if (!event.target.matches("[data-filter]")) return;
    const url = new URL(location.href);
    for (const select of event.currentTarget.querySelectorAll("[data-filter]")) {
      if (select.value) url.searchParams.set(select.name, select.value);
      else url.searchParams.delete(select.name);
    }
    url.searchParams.delete("page");
    window.location.assign(url);
  });

  // --- actions menu ------------------------------------------------------------------------------
  document.addEventListener("click", async (event) => {
    const action = event.target.closest("[data-action]");
    if (!action) return;
    action.closest("details[data-menu]")?.removeAttribute("open");
    if (action.dataset.action === "retry-sync") {
      const result = await api(`/api/v1/benchmarks/${encodeURIComponent(benchmarkId)}/sync`, { method: "POST", body: {} });
      toast(result.ok ? "Sync requested" : errorText(result, "Could not start the sync"));
      if (result.ok) header.dataset.sync = "pending";
      await refreshRegions(["header"]);
      // The header now says queued; a sync that fails again before the next probe would give the
      // probe the key it had before the retry, and the header would never be redrawn.
      live.reset(null);
      live.now();
    } else if (action.dataset.action === "remove") {
      const name = document.querySelector("h1")?.firstChild?.textContent.trim() || "this benchmark";
      if (!window.confirm(`Remove ${name} from this workspace? Its runs stay in the event log.`)) return;
      const result = await api(`/api/v1/benchmarks/${encodeURIComponent(benchmarkId)}`, { method: "DELETE" });
      if (result.ok) window.location.assign("/benchmarks");
      else toast(errorText(result, "Could not remove the benchmark"));
    }
  });

  // --- exclude a broken task from the version (workspace admins): the server says why it refuses ----
  document.querySelector("[data-exclude-task]")?.addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = event.currentTarget;
    const body = { task: form.elements.task.value, reason: form.elements.reason.value };
    if (!window.confirm(`Exclude ${body.task}? Every run of this version will rank without it.`)) return;
    const result = await api(`/api/v1/benchmarks/${encodeURIComponent(benchmarkId)}/exclusions`, { method: "POST", body });
    if (result.ok) window.location.reload();
    else toast(errorText(result, "Could not exclude the task"));
  });

  // --- live: runs (status, progress) and, until it is ready, the sync status ----------------------
  let busy = true;
  const live = poll({
    async probe() {
      // The same page of the same filtered list as the table shows.
      const here = new URL(location.href).searchParams;
      const query = new URLSearchParams({ benchmark: benchmarkId, limit: "50", offset: String(50 * (Math.max(1, Number(here.get("page")) || 1) - 1)) });
      for (const name of ["status", "submitter"]) if (here.get(name)) query.set(name, here.get(name));
      const runs = await api(`/api/v1/runs?${query}`);
      if (!runs.ok) return null;
      const rows = runs.data.benchmark_runs;
      let sync = header.dataset.sync;
      if (sync !== "ready") {
        const detail = await api(`/api/v1/benchmarks/${encodeURIComponent(benchmarkId)}`);
        if (detail.ok) sync = `${detail.data.benchmark.sync_status}:${detail.data.benchmark.synced_task_count}`;
      }
      busy = sync.split(":")[0] !== "ready" && sync.split(":")[0] !== "failed" || rows.some((r) => !TERMINAL.includes(r.status));
      return JSON.stringify([sync, rows.map((r) => [r.id, r.status, r.ingested_results, r.expected_results, r.best_pass_at_1])]);
    },
    async onChange(key) {
      const sync = JSON.parse(key)[0].split(":")[0];
      await keepingPicks(() => refreshRegions(["header", "leaderboard", "runs"]));
      header.dataset.sync = sync;
    },
    every: () => (busy ? 1000 : 5000),
  });
  document.addEventListener("regatta:changed", () => live.now());
})();
