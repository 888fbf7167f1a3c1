/* Run page: live updates while the run is in progress, Task Results (from /api/v1/runs/{id}/attempts,
 * filterable, each result expandable) and Logs (newest page first, "Load older" follows the cursor). */
"use strict";

(() => {
  const { api, el, fmt, poll, refreshRegions, errorText } = Regatta;
  const data = JSON.parse(document.getElementById("run-data").textContent);
  const runId = data.id;
  const runPath = `/api/v1/runs/${encodeURIComponent(runId)}`;
  const { TERMINAL } = Regatta;
  let terminal = data.terminal;
  const labels = Object.fromEntries(data.agent_indexes.map((index, i) => [index, data.agents[i]]));

  const panel = (name) => document.getElementById(`panel-${name}`);
  const visible = (name) => !panel(name).hidden;

  // --- Task Results --------------------------------------------------------------------------------
  const body = document.getElementById("results-body");
  const count = document.getElementById("results-count");
  const filters = {
    q: document.getElementById("results-search"),
    agent: document.getElementById("results-agent"),
    task: document.getElementById("results-task"),
    outcome: document.getElementById("results-outcome"),
    label: document.getElementById("results-label"),
    integrity: document.getElementById("results-integrity"),
  };
  const PAGE = 300; // rows rendered at once; "Show more" adds pages, so huge runs stay responsive
  let shown = PAGE;
  let attempts = null;
  const open = new Set();
  const conversations = new Map(); // attempt id → its rendered conversation, once loaded

  // Filters live in the URL too, so a filtered view can be shared or reloaded.
  const params = new URL(location.href).searchParams;
  for (const [key, input] of Object.entries(filters)) if (params.get(key)) input.value = params.get(key);

  const state = (a) => a.outcome || a.status || "scheduled";
  // What each outcome means (docs/reference/statistics.md §1).
  const OUTCOME_HELP = {
    passed: "Scored: the primary reward reached the run's pass threshold.",
    failed: "Scored as a failure: the reward is below the threshold, or the agent left its sandbox in a state "
      + "in which the verifier could give no verdict (the reason is in the details).",
    errored: "Not scored: a fault outside the sandbox (engine, network, model provider, the platform itself).",
    cancelled: "Not scored: the run was stopped.",
  };
  // A failure without a reward: the sandbox's state kept the verifier from a verdict.
  const noVerdict = (a) => a.outcome === "failed" && result(a).primary_reward == null && result(a).exception_type;
  // The task's own Dockerfile fails at a step (regatta_shared.rules.task_defects): not retried, not re-run.
  const taskDefect = (a) => a.outcome === "errored" && result(a).exception_type === "TaskDefectError";
  const result = (a) => a.result || {};
  // The attempts each integrity filter keeps: those the server's per-agent counts count under the same
  // word (GET /runs/{key}/attempts?integrity=…; `a.integrity` holds the attempt's counts).
  const INTEGRITY = {
    unexplained: (seen) => (seen?.unexplained || 0) > 0,
    verifier_writes: (seen) => (seen?.verifier_files_written || 0) > 0,
    processes: (seen) => (seen?.processes_alive || 0) > 0,
    not_checked: (seen) => seen?.checked === false,
  };
  const flagged = (a) => INTEGRITY.unexplained(a.integrity) || INTEGRITY.verifier_writes(a.integrity);
  function seconds(a) {
    const total = result(a).timings?.total;
    if (total !== undefined && total !== null) return total;
    if (a.started_at && a.finished_at) return (Date.parse(a.finished_at) - Date.parse(a.started_at)) / 1000;
    return null;
  }
  function tokens(a) {
    const usage = result(a).usage || {};
    if (usage.input_tokens === null && usage.output_tokens === null) return null;
    if (usage.input_tokens === undefined && usage.output_tokens === undefined) return null;
    return (usage.input_tokens || 0) + (usage.output_tokens || 0);
  }

  function matches(a) {
    const q = filters.q.value.trim().toLowerCase();
    if (filters.agent.value !== "" && String(a.agent_index) !== filters.agent.value) return false;
    if (filters.task.value && a.task !== filters.task.value) return false;
    if (filters.outcome.value && state(a) !== filters.outcome.value) return false;
    if (filters.integrity.value && !(INTEGRITY[filters.integrity.value] || (() => false))(a.integrity)) return false;
    if (filters.label.value === "(none)" && (a.labels || []).length) return false;
    if (filters.label.value && filters.label.value !== "(none)" && !(a.labels || []).some((x) => x.label === filters.label.value)) return false;
    if (!q) return true;
    const haystack = [a.task, labels[a.agent_index], state(a), result(a).exception_type, result(a).exception_message, result(a).environment, a.attempt_id,
      ...(a.labels || []).map((x) => x.label)]
      .filter(Boolean).join(" ").toLowerCase();
    return q.split(/\s+/).every((word) => haystack.includes(word));
  }

  function renderResults() {
    if (!attempts) return;
    const rows = attempts.filter(matches);
    const fragment = document.createDocumentFragment();
    for (const a of rows.slice(0, shown)) {
      const detailId = `detail-${a.attempt_id}`;
      const isOpen = open.has(a.attempt_id);
      const outcome = state(a);
      const reward = result(a).primary_reward;
      const label = labels[a.agent_index] ?? `agent ${a.agent_index + 1}`;
      fragment.append(
        el("tr", { class: isOpen ? "is-open" : "", dataset: { attemptId: a.attempt_id } },
          el("td", {}, el("button", {
            type: "button", class: "toggle", "aria-expanded": isOpen ? "true" : "false", "aria-controls": detailId,
            "aria-label": `Details of ${a.task}, attempt ${a.attempt_index + 1}, ${label}`, dataset: { toggle: a.attempt_id },
          }, isOpen ? "▾" : "▸")),
          el("td", { class: "strong" }, a.task),
          el("td", {}, label),
          el("td", { class: "num" }, String(a.attempt_index + 1)),
          el("td", {}, el("span", { class: `badge status-${outcome}`, title: OUTCOME_HELP[outcome] || "" }, outcome),
            noVerdict(a)
              ? [" ", el("span", { class: "tag", title: result(a).exception_message || "", "data-testid": "no-verdict-tag" }, "no verdict")]
              : null,
            taskDefect(a)
              ? [" ", el("span", { class: "tag", title: "The task's own Dockerfile fails at a step, the same on every try: "
                + "not retried and not re-run. A workspace admin can exclude the task from its benchmark version.",
              "data-testid": "task-defect-tag" }, "task defect")]
              : null,
            result(a).environment_built === false
              ? [" ", el("span", { class: "tag", title: result(a).environment_note || "", "data-testid": "not-built-tag" }, "env not built")]
              : null,
            flagged(a)
              ? [" ", el("a", { class: "tag tag-warn", href: attemptPage(a), title: "Integrity evidence to review on the attempt page", "data-testid": "integrity-tag" }, "integrity")]
              : null,
            (a.labels || []).flatMap((x) => [" ", el("span", { class: "tag tag-label", title: x.note || `labelled by ${x.by}`, "data-testid": "attempt-label" }, x.label)])),
          el("td", { class: "num" }, reward === null || reward === undefined ? "—" : String(+reward.toFixed(4))),
          el("td", { class: "num" }, a.status === "running" && a.started_at
            ? el("span", { dataset: { duration: "", start: a.started_at, end: "" } }, "…")
            : fmt.duration(seconds(a))),
          el("td", { class: "num" }, fmt.tokens(tokens(a))),
          el("td", { class: "num" }, String(a.try_number || 1)),
        ),
      );
      if (isOpen) fragment.append(el("tr", { class: "detail", id: detailId }, el("td", { colspan: "9" }, detail(a))));
    }
    if (rows.length > shown) {
      fragment.append(el("tr", { class: "empty" }, el("td", { colspan: "9" },
        el("button", { type: "button", class: "btn btn-small", onclick: () => { shown += PAGE; renderResults(); } },
          `Show more (${rows.length - shown} hidden)`))));
    }
    if (!rows.length) {
      fragment.append(el("tr", { class: "empty" }, el("td", { colspan: "9" },
        attempts.length ? "No result matches these filters." : "No attempts scheduled yet.")));
    }
    body.replaceChildren(fragment);
    Regatta.enhance(body);
    count.textContent = `Showing ${Math.min(rows.length, shown)} of ${attempts.length} results` +
      (rows.length !== attempts.length ? ` (${rows.length} match the filters)` : "");
  }

  function kv(entries) {
    const list = el("dl", { class: "kv" });
    for (const [key, value] of entries) {
      if (value === undefined || value === null || value === "") continue;
      list.append(el("dt", {}, key), el("dd", {}, value));
    }
    return list;
  }

  // --- downloads: GET /api/v1/runs/{id}/downloads answers a manifest with a signed URL per file ------
  const MANIFEST_TTL = 10 * 60 * 1000; // the signed URLs live 15 minutes; refresh well before that
  const manifests = {};
  // As the gateway's downloads._segment: '%' too (a Harbor step name may hold one; download paths do not).
  const segment = (text) => {
    const cleaned = String(text).replace(/[/\\%]/g, "_").trim();
    return ["", ".", ".."].includes(cleaned) ? "_" : cleaned;
  };
  // Same-origin path of a signed URL: the gateway may know itself under another host name.
  const local = (url) => { try { const u = new URL(url, location.href); return u.pathname + u.search; } catch (e) { return url; } };
  async function manifest(types, fresh = false) {
    const cached = manifests[types];
    if (!fresh && cached && Date.now() - cached.at < MANIFEST_TTL) return cached;
    const response = await api(`${data.downloads}?types=${encodeURIComponent(types)}`);
    if (!response.ok) return { error: errorText(response, "Downloads are not available"), files: new Map() };
    manifests[types] = { at: Date.now(), files: new Map((response.data.files || []).map((f) => [f.path, f])) };
    return manifests[types];
  }
  // The layout of the downloads route: artifacts/<task>/agent-<a>-attempt-<n>/<artifact path>.
  const artifactPath = (a, artifact) => ["artifacts", segment(a.task), `agent-${a.agent_index + 1}-attempt-${a.attempt_index + 1}`,
    ...artifact.path.split("/").map(segment)].join("/");
  async function artifactFile(a, artifact) {
    let files = (await manifest("artifacts")).files;
    if (!files.has(artifactPath(a, artifact))) files = (await manifest("artifacts", true)).files; // finished since
    return files.get(artifactPath(a, artifact)) || null;
  }
  async function linkArtifacts(a, list) {
    for (const item of list.querySelectorAll("[data-artifact]")) {
      const artifact = (result(a).artifacts || [])[Number(item.dataset.artifact)];
      const file = artifact && await artifactFile(a, artifact);
      if (!file?.url) continue;
      const name = item.querySelector(".mono");
      name.replaceWith(el("a", { class: "mono", href: local(file.url), download: "" }, artifact.path));
    }
  }

  const attemptPage = (a) => `/benchmarks/runs/${encodeURIComponent(data.id)}/attempts/${encodeURIComponent(a.attempt_id)}`;

  // Counts only: the evidence itself (paths, processes) is on the attempt page.
  function integrityBlock(a) {
    const seen = a.integrity;
    const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
    return el("div", { class: "detail-block", "data-testid": "integrity-block" }, el("h4", {}, "Verifier integrity"),
      seen.checked
        ? kv([
          ["Tool-chain changes", `${plural(seen.unexplained, "unexplained change")}`],
          ["Agent processes", `${seen.processes_alive} alive when the verifier started`],
          ["Verifier files", `${plural(seen.verifier_files_written, "file")} written by another hand`],
        ])
        : el("p", { class: "muted small" }, "Not checked: the platform could not look."),
      el("p", { class: "small" }, el("a", { href: attemptPage(a) }, "Evidence on the attempt page")));
  }

  // Each reward key once with its value; the one the primary reward was taken from is marked (the
  // executor's rule: the benchmark's key, else `reward`, else the only key; else the mean of all).
  function rewardRows(r) {
    const rewards = Object.entries(r.rewards || {});
    if (!rewards.length) return [["Reward", r.primary_reward ?? "—"]];
    const keys = rewards.map(([key]) => key);
    const primary = [data.primary_key, "reward"].find((key) => key && keys.includes(key)) ?? (keys.length === 1 ? keys[0] : null);
    // The primary key first, then by name (the stored JSON does not keep the reward file's order).
    rewards.sort(([a], [b]) => (a === primary ? -1 : b === primary ? 1 : a < b ? -1 : a > b ? 1 : 0));
    const rows = rewards.map(([key, value]) => [key, key === primary ? `${value} (primary)` : String(value)]);
    if (primary === null && r.primary_reward != null) rows.push(["Primary (mean)", String(+r.primary_reward.toFixed(4))]);
    return rows;
  }

  function detail(a) {
    const r = result(a);
    const blocks = [];
    blocks.push(el("div", { class: "detail-block", "data-testid": "grading-block" }, el("h4", {}, "Grading"),
      kv([["Outcome", state(a)], ...rewardRows(r)]),
      a.outcome ? el("p", { class: "small" }, el("a", { href: attemptPage(a) }, "Tests and verifier output on the attempt page")) : null));
    if (r.exception_type || r.exception_message) {
      const heading = noVerdict(a) ? "Why it failed" : taskDefect(a) ? "Task defect" : a.outcome === "errored" ? "Why it was not scored" : "Exception";
      // The message is a bounded reason (the executor keeps the headline and the last lines); the
      // whole text is the attempt's exception.txt, linked here so it is one click away.
      const full = (r.artifacts || []).findIndex((artifact) => artifact.path === "exception.txt");
      const fullLog = full < 0 ? null : el("p", { class: "small", dataset: { artifact: String(full) }, "data-testid": "full-log" },
        "Full text: ", el("span", { class: "mono" }, "exception.txt"));
      const block = el("div", { class: "detail-block detail-wide" }, el("h4", {}, heading),
        el("pre", { class: "exception" }, [r.exception_type, r.exception_message].filter(Boolean).join(": ")), fullLog);
      if (fullLog && data.downloads) linkArtifacts(a, block);
      blocks.push(block);
    }
    if (a.integrity) blocks.push(integrityBlock(a));
    blocks.push(labelBlock(a));
    const timings = r.timings || {};
    blocks.push(el("div", { class: "detail-block" }, el("h4", {}, "Timings"),
      kv([
        ["Environment setup", timings.environment_setup != null ? fmt.duration(timings.environment_setup) : null],
        ["Agent setup", timings.agent_setup != null ? fmt.duration(timings.agent_setup) : null],
        ["Agent execution", timings.agent_execution != null ? fmt.duration(timings.agent_execution) : null],
        ["Verifier", timings.verifier != null ? fmt.duration(timings.verifier) : null],
        ["Total", timings.total != null ? fmt.duration(timings.total) : fmt.duration(seconds(a))],
        ["Sandbox time", r.sandbox_seconds != null ? fmt.duration(r.sandbox_seconds) : null],
      ])));
    const usage = r.usage || {};
    blocks.push(el("div", { class: "detail-block" }, el("h4", {}, "Tokens and cost"),
      kv([
        ["Input tokens", usage.input_tokens != null ? fmt.tokens(usage.input_tokens) : "not reported"],
        ["Output tokens", usage.output_tokens != null ? fmt.tokens(usage.output_tokens) : "not reported"],
        ["Cache tokens", usage.cache_tokens != null ? fmt.tokens(usage.cache_tokens) : null],
        ["LLM cost", usage.cost_usd != null ? fmt.money(usage.cost_usd) : "not reported"],
      ])));
    blocks.push(el("div", { class: "detail-block" }, el("h4", {}, "Attempt"),
      kv([
        ["Attempt id", el("span", { class: "mono" }, a.attempt_id)],
        ["Output", el("a", { href: attemptPage(a), "data-testid": "watch-attempt" }, a.outcome ? "Attempt page" : "Watch live")],
        ["Try", String(a.try_number || 1)],
        ["Scheduled", a.scheduled_at ? fmt.local(a.scheduled_at) : null],
        ["Started", a.started_at ? fmt.local(a.started_at) : null],
        ["Finished", a.finished_at ? fmt.local(a.finished_at) : null],
        ["Executor", r.executor_id],
        ["Environment", r.environment ? el("span", { class: "mono", "data-testid": "attempt-environment" }, r.environment) : null],
        ["Task environment", r.environment_built === false ? "not built" : r.environment_built === true ? "built" : null],
      ])));
    if (r.environment_note) {
      blocks.push(el("div", { class: "detail-block detail-wide" }, el("h4", {}, "Environment"),
        el("p", { class: "alert alert-warning", "data-testid": "environment-note" }, r.environment_note)));
    }
    const artifacts = r.artifacts || [];
    const list = el("ul", { class: "artifact-list", "data-testid": "artifacts" });
    artifacts.forEach((artifact, index) => {
      list.append(el("li", { dataset: { artifact: String(index) } },
        el("span", { class: "mono" }, artifact.path),
        el("span", { class: "muted small nowrap" }, fmt.bytes(artifact.size))));
    });
    blocks.push(el("div", { class: "detail-block detail-wide" }, el("h4", {}, `Artifacts (${artifacts.length})`),
      artifacts.length ? list : el("p", { class: "muted small" }, a.outcome ? "No artifacts were collected." : "Artifacts appear when the attempt finishes."),
      artifacts.length && !data.downloads ? el("p", { class: "muted small" }, "This gateway has no downloads route; the list shows what was stored.") : null));
    if (artifacts.length && data.downloads) linkArtifacts(a, list);
    const trajectory = artifacts.find((artifact) => artifact.path.endsWith("trajectory.json"));
    if (trajectory) {
      const holder = el("div", { class: "detail-block detail-wide" }, el("h4", {}, "Conversation"));
      if (conversations.has(a.attempt_id)) {
        holder.append(conversations.get(a.attempt_id));
      } else if (data.downloads) {
        const button = el("button", { type: "button", class: "btn btn-small", "data-testid": "show-conversation", dataset: { conversation: a.attempt_id } }, "Show conversation");
        button.addEventListener("click", async () => {
          button.disabled = true;
          button.textContent = "Loading…";
          const file = await artifactFile(a, trajectory);
          let problem = "the file is not in the run's downloads";
          if (file?.url) {
            try {
              const response = await fetch(local(file.url), { credentials: "same-origin" });
              if (response.ok) {
                // The table may have been drawn again while the file loaded (the page's first poll redraws
                // it): the conversation replaces whichever button is on the page now, and stays across redraws.
                conversations.set(a.attempt_id, Regatta.renderTrajectory(await response.json()));
                body.querySelector(`[data-conversation="${CSS.escape(a.attempt_id)}"]`)?.replaceWith(conversations.get(a.attempt_id));
                return;
              }
              problem = `HTTP ${response.status}`;
            } catch (error) {
              problem = "it is not valid JSON";
            }
          }
          button.disabled = false;
          button.textContent = `Could not load the trajectory (${problem}); retry`;
        });
        holder.append(button);
      } else {
        holder.append(el("p", { class: "muted small" }, `The trajectory (${trajectory.path}) is stored, but this gateway has no downloads route to read it.`));
      }
      blocks.push(holder);
    }
    return el("div", { class: "detail-grid" }, blocks);
  }


  body.addEventListener("click", (event) => {
    const toggle = event.target.closest("[data-toggle]");
    if (!toggle) return;
    const id = toggle.dataset.toggle;
    if (open.has(id)) open.delete(id); else open.add(id);
    renderResults();
    body.querySelector(`[data-toggle="${CSS.escape(id)}"]`)?.focus();
  });
  for (const [key, input] of Object.entries(filters)) {
    input.addEventListener(input.tagName === "SELECT" ? "change" : "input", () => {
      shown = PAGE;
      const url = new URL(location.href);
      if (input.value) url.searchParams.set(key, input.value); else url.searchParams.delete(key);
      history.replaceState(history.state, "", url);
      renderResults();
    });
  }

  let attemptsSeen = null;
  async function loadAttempts() {
    const response = await api(`${runPath}/attempts`);
    if (!response.ok) { count.textContent = errorText(response, "Could not load the results"); return; }
    // A refresh that changes nothing leaves the table alone: redrawing it would take the focus and
    // the caret from a member typing a label.
    const seen = JSON.stringify(response.data.attempts);
    if (seen === attemptsSeen) return;
    attemptsSeen = seen;
    attempts = response.data.attempts;
    labelOptions();
    renderResults();
  }

  // --- Labels: a member's judgement of an attempt (POST/DELETE .../attempts/{id}/labels) -------------
  const attemptPath = (a) => `${runPath}/attempts/${encodeURIComponent(a.attempt_id)}/labels`;

  // What a member has typed but not yet added, per attempt: a live run redraws the table under them.
  const drafts = new Map();

  let linkedLabel = params.get("label"); // from a shared URL: an option only once the attempts are in

  function labelOptions() {
    const names = [...new Set(attempts.flatMap((a) => (a.labels || []).map((x) => x.label)))].sort();
    const chosen = filters.label.value || linkedLabel || "";
    linkedLabel = null;
    const keep = [...filters.label.options].slice(0, 2);
    if (chosen && chosen !== "(none)" && !names.includes(chosen)) names.push(chosen);
    filters.label.replaceChildren(...keep, ...names.map((name) => el("option", { value: name }, name)));
    filters.label.value = chosen;
  }

  function labelBlock(a) {
    const block = el("div", { class: "detail-block detail-wide", "data-testid": "labels-block" }, el("h4", {}, "Labels"));
    const list = el("ul", { class: "label-list" });
    for (const x of a.labels || []) {
      const remove = el("button", { type: "button", class: "btn btn-small", "aria-label": `Remove the label ${x.label}` }, "Remove");
      remove.addEventListener("click", async () => {
        remove.disabled = true;
        const response = await api(`${attemptPath(a)}/${encodeURIComponent(x.id)}`, { method: "DELETE" });
        if (!response.ok) { remove.disabled = false; message.textContent = errorText(response, "Could not remove the label"); return; }
        await loadAttempts();
      });
      list.append(el("li", {}, el("span", { class: "tag tag-label" }, x.label), " ",
        x.note ? el("span", { class: "label-note" }, x.note) : null, " ",
        el("span", { class: "muted small" }, `${x.by || "unknown"}, ${fmt.local(x.at)}`), " ", remove));
    }
    const choices = `labels-${a.attempt_id}`;
    const name = el("input", { type: "text", list: choices, maxlength: "40", required: "", placeholder: "flaky task", "aria-label": "Label", "data-testid": "label-input" });
    const note = el("input", { type: "text", maxlength: "2000", placeholder: "Why (optional)", "aria-label": "Note", "data-testid": "label-note" });
    const message = el("p", { class: "small", role: "status", "data-testid": "label-message" });
    const form = el("form", { class: "label-form" },
      el("datalist", { id: choices }, data.suggested_labels.map((value) => el("option", { value }))),
      name, note, el("button", { type: "submit", class: "btn btn-small", "data-testid": "label-add" }, "Add label"));
    const draft = drafts.get(a.attempt_id);
    if (draft) { name.value = draft.label; note.value = draft.note; }
    form.addEventListener("input", () => drafts.set(a.attempt_id, { label: name.value, note: note.value }));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const response = await api(attemptPath(a), { method: "POST", body: { label: name.value, note: note.value } });
      if (!response.ok) { message.textContent = errorText(response, "Could not add the label"); return; }
      drafts.delete(a.attempt_id);
      await loadAttempts();
    });
    block.append((a.labels || []).length ? list : el("p", { class: "muted small" }, "No labels yet."), form, message);
    return block;
  }

  // --- Logs ------------------------------------------------------------------------------------------
  const logsBody = document.getElementById("logs-body");
  const olderButton = document.getElementById("logs-older");
  const logs = { entries: [], keys: new Set(), cursor: null, loaded: false };
  const logKey = (entry) => `${entry.timestamp}|${entry.step}|${entry.message}|${entry.details?.event_id ?? ""}`;

  function renderLogs() {
    const rows = logs.entries.map((entry) =>
      el("tr", {},
        el("td", { title: entry.timestamp }, entry.timestamp ? fmt.local(entry.timestamp) : ""),
        el("td", {}, el("span", { class: `level level-${(entry.level || "").toLowerCase()}` }, entry.level || "")),
        el("td", {}, entry.step || ""),
        el("td", {}, entry.message || "")));
    logsBody.replaceChildren(...(rows.length ? rows : [el("tr", { class: "empty" }, el("td", { colspan: "4" }, "No log entries yet."))]));
    olderButton.hidden = !logs.cursor;
  }

  // The tab reads "from submission to cleanup, oldest first": its first load walks back to the run's
  // beginning, so the submission is the first row without "Load older", for up to FIRST_PAGES pages of the
  // API's largest page; an even longer run's beginning is behind "Load older".
  const FIRST_PAGES = 5;
  let logsLoading = null;
  function loadNewestLogs() {
    // One load at a time: two at once would both add the entries neither had seen.
    logsLoading ??= fetchNewestLogs().finally(() => { logsLoading = null; });
    return logsLoading;
  }
  async function fetchNewestLogs() {
    // Newest page; if it does not overlap what we have, walk older pages (bounded) to close the gap.
    const first = !logs.loaded;
    const limit = first ? 200 : 50;
    let page = await api(`${runPath}/logs?limit=${limit}`);
    if (!page.ok) return;
    const fresh = [];
    let cursor = page.data.next_cursor;
    let batch = page.data.logs || [];
    for (let guard = 0; guard < 20; guard += 1) {
      const unseen = batch.filter((entry) => !logs.keys.has(logKey(entry)));
      fresh.unshift(...unseen);
      if (!cursor || (first ? guard + 1 >= FIRST_PAGES : unseen.length < batch.length)) break;
      page = await api(`${runPath}/logs?limit=${limit}&cursor=${encodeURIComponent(cursor)}`);
      if (!page.ok) break;
      cursor = page.data.next_cursor;
      batch = page.data.logs || [];
    }
    if (!logs.loaded) { logs.cursor = cursor; logs.loaded = true; }
    for (const entry of fresh) logs.keys.add(logKey(entry));
    logs.entries.push(...fresh);
    renderLogs();
  }

  olderButton.addEventListener("click", async () => {
    if (!logs.cursor) return;
    olderButton.disabled = true;
    const page = await api(`${runPath}/logs?limit=50&cursor=${encodeURIComponent(logs.cursor)}`);
    olderButton.disabled = false;
    if (!page.ok) { Regatta.toast(errorText(page, "Could not load older entries")); return; }
    const older = (page.data.logs || []).filter((entry) => !logs.keys.has(logKey(entry)));
    for (const entry of older) logs.keys.add(logKey(entry));
    logs.entries.unshift(...older);
    logs.cursor = page.data.next_cursor;
    renderLogs();
  });

  // --- the Download menu: fresh signed links each time it opens -------------------------------------
  const LABELS = { "summary.csv": "Metrics (summary.csv)", "results.csv": "Task results (results.csv)", "logs.txt": "Logs (logs.txt)" };
  async function fillDownloads(menu) {
    const box = menu.querySelector("[data-downloads]");
    const listing = await manifest("summary,results,logs", true);
    const links = [...listing.files.values()].map((file) =>
      el("a", { role: "menuitem", href: local(file.url), download: "" }, LABELS[file.path] || file.path,
        el("span", { class: "muted small" }, ` · ${fmt.bytes(file.size)}`)));
    const notes = [];
    if (listing.error) notes.push(el("p", { class: "menu-note" }, listing.error));
    if (!terminal) notes.push(el("p", { class: "menu-note" }, "The run is in progress: files are its current snapshot."));
    // Every attempt's artifacts in one zip, streamed by the gateway (GET /api/v1/runs/{key}/artifacts.zip).
    const zip = el("a", { role: "menuitem", href: `${runPath}/artifacts.zip`, download: "", "data-testid": "artifacts-zip" }, "All artifacts (.zip)");
    notes.push(el("p", { class: "menu-note" }, "One attempt's artifacts: open it in Task Results."));
    box.replaceChildren(...links, zip, ...notes);
  }
  document.addEventListener("toggle", (event) => {
    const menu = event.target;
    if (menu.matches?.("details[data-downloads-menu]") && menu.open) fillDownloads(menu);
  }, true); // toggle does not bubble: listen in the capture phase

  // --- Run again: the Configuration TOML, submitted as is, as a new run ------------------------------
  document.querySelector("[data-run-again-form]")?.addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = event.currentTarget;
    const button = form.querySelector("[type=submit]");
    const problem = form.querySelector("[data-testid=run-again-error]");
    button.disabled = true;
    problem.hidden = true;
    const toml = document.getElementById("config-toml").textContent;
    const sent = await api("/api/v1/runs", { method: "POST", body: toml, headers: { "Content-Type": "application/toml" } });
    if (sent.ok) { location.assign(`/benchmarks/runs/${encodeURIComponent(sent.data.id)}`); return; }
    const issues = (sent.data.issues || []).map((issue) => `${issue.key}: ${issue.message}`);
    problem.textContent = [errorText(sent, "Could not submit the run"), ...issues].join("; ");
    problem.hidden = false;
    button.disabled = false;
  });

  // --- tabs: load lazily ---------------------------------------------------------------------------
  document.querySelector("[data-tabs]").addEventListener("tabchange", (event) => {
    if (event.detail.tab === "results" && attempts === null) loadAttempts();
    if (event.detail.tab === "logs" && !logs.loaded) loadNewestLogs();
  });
  if (visible("results")) loadAttempts();
  if (visible("logs")) loadNewestLogs();

  // --- live updates while the run is in progress --------------------------------------------------
  const runKey = (detail) => JSON.stringify([
    detail.benchmark_run.status,
    detail.progress,
    detail.totals,
    (detail.agents || []).map((a) => a.status),
    (detail.agent_metrics || []).map((m) => [m.pass_at_1?.value, m.final, m.passed, m.failed, m.errored, m.cancelled, m.rank, m.tied]),
  ]);
  const live = poll({
    async probe() {
      const response = await api(runPath);
      if (!response.ok) return null;
      terminal = TERMINAL.includes(response.data.benchmark_run.status);
      return runKey(response.data);
    },
    async onChange() {
      await refreshRegions(["actions", "sidebar", "overview"]);
      if (attempts !== null) await loadAttempts();
      if (logs.loaded) await loadNewestLogs();
    },
    every: () => (terminal ? null : 1500),
  });
  document.addEventListener("regatta:changed", async () => {
    await refreshRegions(["actions", "sidebar"]);
    live.now();
  });
  // Attempts change state (scheduled → running) without changing the run's counters: while the results
  // tab is open on a live run, refresh them on their own clock too.
  const attemptsTimer = setInterval(() => {
    if (terminal) { clearInterval(attemptsTimer); return; }
    if (!document.hidden && visible("results") && attempts !== null) loadAttempts();
  }, 2000);
})();
