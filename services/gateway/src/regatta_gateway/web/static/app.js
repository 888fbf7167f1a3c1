/* Regatta web UI: behaviour shared by every page. Vanilla JS, no build step, no dependencies.
 *
 * Event handlers are delegated from `document`, so regions that live updates replace keep working
 * without re-binding. Pages add their own small script (benchmarks.js, run.js, ...).
 */
"use strict";

const Regatta = (() => {
  const UI_HEADER = "X-Regatta-UI"; // lets the gateway accept the sign-in cookie on non-GET API calls

  /** fetch() for /api/v1: JSON in and out; resolves {ok, status, data}; never throws on HTTP errors. */
  async function api(path, { method = "GET", body, headers = {} } = {}) {
    const init = { method, credentials: "same-origin", headers: { Accept: "application/json", [UI_HEADER]: "1", ...headers } };
    if (body !== undefined) {
      init.body = typeof body === "string" ? body : JSON.stringify(body);
      init.headers["Content-Type"] = init.headers["Content-Type"] || "application/json";
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (error) {
      return { ok: false, status: 0, data: { message: "The gateway did not answer (network error)." } };
    }
    if (response.status === 401 && !path.startsWith("/signin")) {
      // The token was revoked or expired: back to sign-in, then here again.
      window.location.assign(`/signin?next=${encodeURIComponent(location.pathname + location.search)}`);
      return { ok: false, status: 401, data: {} };
    }
    let data = null;
    const text = await response.text();
    if (text) {
      try { data = JSON.parse(text); } catch (error) { data = { message: text.slice(0, 300) }; }
    }
    return { ok: response.ok, status: response.status, data: data || {} };
  }

  function errorText(result, fallback = "Request failed") {
    const data = result.data || {};
    return data.message || data.error || data.detail || `${fallback} (HTTP ${result.status})`;
  }

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  let toastTimer = null;
  function toast(message) {
    const box = document.getElementById("toast");
    if (!box) return;
    box.textContent = message;
    box.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { box.hidden = true; }, 3500);
  }

  // --- formatting (mirrors formatting.py so live values read like server-rendered ones) ----------
  const fmt = {
    pct(v, digits = 1) { return v === null || v === undefined ? "—" : `${(v * 100).toFixed(digits)}%`; },
    duration(seconds) {
      if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "—";
      seconds = Math.max(0, seconds);
      if (seconds < 10) return `${seconds.toFixed(1)} s`;
      if (seconds < 60) return `${Math.round(seconds)} s`;
      let minutes = Math.floor(Math.round(seconds) / 60);
      const secs = Math.round(seconds) % 60;
      if (minutes < 60) return `${minutes} m ${String(secs).padStart(2, "0")} s`;
      const hours = Math.floor(minutes / 60);
      minutes %= 60;
      return `${hours} h ${String(minutes).padStart(2, "0")} m`;
    },
    money(v) {
      if (v === null || v === undefined) return "—";
      if (v === 0) return "$0.00";
      return Math.abs(v) < 1 ? `$${v.toFixed(4)}` : `$${v.toLocaleString(undefined, { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
    },
    tokens(v) {
      if (v === null || v === undefined) return "—";
      if (v >= 1e6) return `${(v / 1e6).toFixed(1)}M`;
      if (v >= 1e4) return `${Math.round(v / 1e3)}k`;
      if (v >= 1e3) return `${(v / 1e3).toFixed(1)}k`;
      return String(Math.round(v));
    },
    bytes(n) {
      if (n === null || n === undefined) return "";
      if (n < 1024) return `${n} B`;
      if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
      return `${(n / 1024 / 1024).toFixed(1)} MiB`;
    },
    ago(iso) {
      const then = Date.parse(iso);
      if (Number.isNaN(then)) return "—";
      const seconds = (Date.now() - then) / 1000;
      if (seconds < 45) return "just now";
      const units = [[31536000, "y"], [2592000, "mo"], [86400, "d"], [3600, "h"], [60, "min"]];
      for (const [size, unit] of units) if (seconds >= size) return `${Math.floor(seconds / size)} ${unit} ago`;
      return "just now";
    },
    local(iso) {
      const then = new Date(iso);
      if (Number.isNaN(then.getTime())) return iso || "—";
      return then.toLocaleString(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });
    },
  };

  // --- live text: relative times, local times, running durations ----------------------------------
  function tickTimes(root = document) {
    for (const node of root.querySelectorAll("time[data-rel]")) node.textContent = fmt.ago(node.getAttribute("datetime"));
    for (const node of root.querySelectorAll("time[data-abs]")) {
      if (!node.dataset.localised) { node.textContent = fmt.local(node.getAttribute("datetime")); node.dataset.localised = "1"; }
    }
  }
  function tickDurations(root = document) {
    for (const node of root.querySelectorAll("[data-duration]")) {
      const start = Date.parse(node.dataset.start || "");
      if (Number.isNaN(start)) continue;
      const endText = node.dataset.end || "";
      const end = endText ? Date.parse(endText) : Date.now();
      node.textContent = fmt.duration((end - start) / 1000) + (endText ? "" : " so far");
    }
  }

  // --- sortable tables (client side; the sort survives live refreshes of the region) ---------------
  const sortState = {};
  function sortTable(table, column, direction) {
    const body = table.tBodies[0];
    if (!body) return;
    const type = table.querySelector(`[data-sort-col="${column}"]`)?.dataset.sortType || "text";
    const rows = Array.from(body.rows).filter((row) => !row.classList.contains("empty"));
    const value = (row) => {
      const cell = row.cells[column];
      const raw = cell ? (cell.dataset.value ?? cell.textContent.trim()) : "";
      if (type === "num") {
        const n = parseFloat(raw);
        return Number.isNaN(n) ? null : n;
      }
      return raw.toLowerCase();
    };
    rows.sort((a, b) => {
      const x = value(a), y = value(b);
      if (x === null && y === null) return 0;
      if (x === null) return 1; // missing values last whatever the direction
      if (y === null) return -1;
      const order = x < y ? -1 : x > y ? 1 : 0;
      return direction === "asc" ? order : -order;
    });
    rows.forEach((row) => body.append(row));
    for (const th of table.tHead.rows[0].cells) {
      th.removeAttribute("aria-sort");
      const icon = th.querySelector(".sort-icon");
      if (icon) icon.textContent = "↕";
    }
    const header = table.querySelector(`[data-sort-col="${column}"]`)?.closest("th");
    if (header) {
      header.setAttribute("aria-sort", direction === "asc" ? "ascending" : "descending");
      const icon = header.querySelector(".sort-icon");
      if (icon) icon.textContent = direction === "asc" ? "▲" : "▼";
    }
  }
  function applySorts(root = document) {
    for (const table of root.querySelectorAll("table[data-sortable]")) {
      const state = sortState[table.id];
      if (state) sortTable(table, state.column, state.direction);
    }
  }

  // --- tabs (WAI-ARIA pattern: arrows move, Home/End jump; the URL remembers the tab) --------------
  function selectTab(list, tab, { focus = false, push = true } = {}) {
    const tabs = Array.from(list.querySelectorAll('[role="tab"]'));
    for (const other of tabs) {
      const selected = other === tab;
      other.setAttribute("aria-selected", selected ? "true" : "false");
      other.tabIndex = selected ? 0 : -1;
      const panel = document.getElementById(other.getAttribute("aria-controls"));
      if (panel) panel.hidden = !selected;
    }
    if (focus) tab.focus();
    const param = list.dataset.tabParam;
    if (param && push) {
      const url = new URL(location.href);
      url.searchParams.set(param, tab.dataset.tab);
      history.replaceState(history.state, "", url);
    }
    list.dispatchEvent(new CustomEvent("tabchange", { bubbles: true, detail: { tab: tab.dataset.tab } }));
  }

  document.addEventListener("click", (event) => {
    const tab = event.target.closest('[role="tablist"] [role="tab"]');
    if (tab) { selectTab(tab.closest('[role="tablist"]'), tab); return; }
  });
  document.addEventListener("keydown", (event) => {
    const tab = event.target.closest?.('[role="tablist"] [role="tab"]');
    if (!tab) return;
    const list = tab.closest('[role="tablist"]');
    const tabs = Array.from(list.querySelectorAll('[role="tab"]'));
    const index = tabs.indexOf(tab);
    const moves = { ArrowRight: index + 1, ArrowLeft: index - 1, Home: 0, End: tabs.length - 1 };
    if (!(event.key in moves)) return;
    event.preventDefault();
    selectTab(list, tabs[(moves[event.key] + tabs.length) % tabs.length], { focus: true });
  });

  // --- delegated behaviour: copy, dialogs, menus, clickable rows, sorting, stop, re-run -------------------
  async function copyText(text) {
    try {
      await navigator.clipboard.writeText(text);
    } catch (error) {
      // Clipboard API needs a secure context; an http:// deployment on a LAN name falls back to this.
      const area = el("textarea", { style: "position:fixed;opacity:0" });
      area.value = text;
      document.body.append(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    toast("Copied to the clipboard");
  }

  document.addEventListener("click", async (event) => {
    const target = event.target;
    const copy = target.closest("[data-copy]");
    if (copy) { event.preventDefault(); copyText(copy.dataset.copy); return; }
    const copyFrom = target.closest("[data-copy-from]");
    if (copyFrom) { copyText(document.querySelector(copyFrom.dataset.copyFrom)?.textContent || ""); return; }

    const open = target.closest("[data-open-dialog]");
    if (open) {
      const dialog = document.getElementById(open.dataset.openDialog);
      open.closest("details[data-menu]")?.removeAttribute("open");
      if (dialog) { dialog.showModal(); dialog.querySelector("input:not([type=hidden]):not([type=radio]), button")?.focus(); }
      return;
    }
    if (target.closest("[data-close-dialog]")) { target.closest("dialog")?.close(); return; }

    const sortButton = target.closest("[data-sort-col]");
    if (sortButton) {
      const table = sortButton.closest("table");
      const column = Number(sortButton.dataset.sortCol);
      const previous = sortState[table.id];
      const numeric = sortButton.dataset.sortType === "num";
      let direction = numeric ? "desc" : "asc";
      if (previous && previous.column === column) direction = previous.direction === "asc" ? "desc" : "asc";
      sortState[table.id] = { column, direction };
      sortTable(table, column, direction);
      return;
    }

    const stop = target.closest("[data-stop-run]");
    if (stop) {
      event.preventDefault();
      const name = stop.dataset.runName || stop.dataset.stopRun;
      if (!window.confirm(`Stop run "${name}"? Results already written stay on the run.`)) return;
      stop.disabled = true;
      const result = await api(`/api/v1/runs/${encodeURIComponent(stop.dataset.stopRun)}/stop`, { method: "POST", body: {} });
      if (result.ok) {
        stop.textContent = "Stopping…";
        toast(`Stopping ${name}`);
      } else {
        stop.disabled = false;
        toast(errorText(result, "Could not stop the run"));
      }
      document.dispatchEvent(new CustomEvent("regatta:changed"));
      return;
    }

    const rerun = target.closest("[data-rerun-errored]");
    if (rerun) {
      event.preventDefault();
      rerun.disabled = true;
      const result = await api(`/api/v1/runs/${encodeURIComponent(rerun.dataset.rerunErrored)}/rerun-errored`, { method: "POST", body: {} });
      if (result.ok) {
        rerun.textContent = "Re-running…";
        toast(`Re-running ${result.data.attempts} errored attempt${result.data.attempts === 1 ? "" : "s"} of ${rerun.dataset.runName}`);
      } else {
        rerun.disabled = false;
        toast(errorText(result, "Could not re-run the errored attempts"));
      }
      document.dispatchEvent(new CustomEvent("regatta:changed"));
      return;
    }

    // Whole-row navigation for tables of links; real links and buttons inside keep their own meaning.
    const row = target.closest("tr[data-href]");
    if (row && !target.closest("a, button, input, select, textarea, label, summary, [role=tooltip]")) {
      if (event.ctrlKey || event.metaKey) window.open(row.dataset.href, "_blank");
      else window.location.assign(row.dataset.href);
    }
  });

  // Menus built on <details>: close when clicking elsewhere or pressing Escape.
  document.addEventListener("click", (event) => {
    for (const menu of document.querySelectorAll("details[data-menu][open]")) {
      if (!menu.contains(event.target)) menu.removeAttribute("open");
    }
  });
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    for (const menu of document.querySelectorAll("details[data-menu][open]")) {
      menu.removeAttribute("open");
      menu.querySelector("summary")?.focus();
    }
  });

  // --- rank tooltips -------------------------------------------------------------------------------
  // They live in horizontally scrolling tables, which would clip them; while one shows it is placed
  // against the viewport instead. Escape hides it (WCAG 1.4.13) until the pointer or focus leaves.
  let activeTip = null;
  function placeTooltip(wrap) {
    const tip = wrap.querySelector(".tooltip");
    if (!tip) return;
    activeTip = wrap;
    wrap.classList.remove("tip-dismissed");
    tip.classList.add("is-floating");
    const anchor = (wrap.querySelector(".rank") || wrap).getBoundingClientRect();
    // Above the rank's row when it fits, so the rows below (the next one to hover) stay readable;
    // below the row only when the row is at the top of the window.
    const row = (wrap.closest("tr") || wrap).getBoundingClientRect();
    const width = tip.offsetWidth;
    const height = tip.offsetHeight;
    const left = Math.min(Math.max(8, anchor.left), window.innerWidth - width - 8);
    let top = row.top - height - 4;
    if (top < 8) top = row.bottom + 4;
    tip.style.left = `${left}px`;
    tip.style.top = `${top}px`;
  }
  document.addEventListener("mouseover", (event) => {
    const wrap = event.target.closest?.(".rank-wrap");
    if (wrap && wrap !== activeTip) placeTooltip(wrap);
    if (!wrap && activeTip && !activeTip.contains(document.activeElement)) activeTip = null;
  });
  document.addEventListener("focusin", (event) => {
    const wrap = event.target.closest?.(".rank-wrap");
    if (wrap) placeTooltip(wrap);
  });
  window.addEventListener("scroll", () => { if (activeTip) placeTooltip(activeTip); }, true);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && activeTip) activeTip.classList.add("tip-dismissed");
  });

  // --- live regions ------------------------------------------------------------------------------
  /** Fetches `?fragment=a,b` of the current page and swaps the matching [data-region] elements. */
  async function refreshRegions(names, url = location.pathname + location.search) {
    const target = new URL(url, location.href);
    target.searchParams.set("fragment", names.join(","));
    let response;
    try {
      response = await fetch(target, { credentials: "same-origin", headers: { Accept: "application/json" } });
    } catch (error) {
      return false;
    }
    if (response.status === 401) { location.reload(); return false; }
    if (!response.ok) return false;
    const parts = await response.json();
    for (const [name, html] of Object.entries(parts)) {
      const region = document.querySelector(`[data-region="${name}"]`);
      if (!region) continue;
      // Keep an open menu open and focus in place if the user is interacting with the region.
      const openMenu = region.querySelector("details[data-menu][open]") !== null;
      const active = region.contains(document.activeElement) ? document.activeElement : null;
      const activeKey = active && (active.id || active.dataset.sortCol || active.dataset.stopRun);
      region.innerHTML = html;
      if (openMenu) region.querySelector("details[data-menu]")?.setAttribute("open", "");
      if (activeKey) {
        const again = region.querySelector(`#${CSS.escape(activeKey)}, [data-sort-col="${activeKey}"], [data-stop-run="${activeKey}"]`);
        again?.focus();
      }
      enhance(region);
    }
    return true;
  }

  /**
   * Polls while the page is visible: `probe()` returns a key (a string) describing what is shown;
   * when it changes `onChange(key)` runs. `every(key)` gives the next delay in ms (null: stop).
   */
  function poll({ probe, onChange, every }) {
    let last = null;
    let timer = null;
    let stopped = false;
    async function run() {
      timer = null;
      if (stopped) return;
      if (document.hidden) { timer = setTimeout(run, 1000); return; }
      let key = last;
      try {
        key = await probe();
      } catch (error) {
        key = last;
      }
      // The first probe refreshes too: the state may have moved between the server render and now
      // (a 10-task sync can finish in that gap), and nothing else would ever redraw it.
      if (key !== null && key !== last) {
        last = key;
        await onChange(key);
      }
      const delay = every(last);
      if (delay !== null && !stopped) timer = setTimeout(run, delay);
    }
    run();
    return {
      now() { if (timer) { clearTimeout(timer); } run(); },
      stop() { stopped = true; if (timer) clearTimeout(timer); },
      reset(key) { last = key; },
    };
  }

  function enhance(root = document) {
    tickTimes(root);
    tickDurations(root);
    applySorts(root);
  }

  // Selects marked data-autosubmit (the workspace switcher) submit their form on change; their
  // Switch button stays only for browsers without scripts.
  document.addEventListener("change", (event) => {
    const select = event.target.closest("select[data-autosubmit]");
    if (select && select.form) select.form.submit();
  });

  document.addEventListener("DOMContentLoaded", () => {
    for (const button of document.querySelectorAll("[data-autosubmit-button]")) button.hidden = true;
    enhance(document);
    setInterval(() => tickDurations(document), 1000);
    setInterval(() => tickTimes(document), 30000);
  });

  // The run statuses that are final, as the server defines them (regatta_shared.runs.status).
  const TERMINAL = (document.body.dataset.terminalStatuses || "").split(" ").filter(Boolean);
  // A benchmark's sync statuses that mean it is still syncing (regatta_shared.rules.benchmark_status).
  const SYNCING = (document.body.dataset.syncingStatuses || "").split(" ").filter(Boolean);

  return { api, errorText, el, toast, fmt, refreshRegions, poll, enhance, selectTab, copyText, TERMINAL, SYNCING };
})();

/** Shows server `issues` (and single-field errors) next to the inputs they name; the rest in `summary`. */
Regatta.showIssues = function showIssues(form, issues, summary, normalise = (key) => key) {
  for (const node of form.querySelectorAll("[data-error-for]")) { node.hidden = true; node.textContent = ""; }
  for (const node of form.querySelectorAll("[aria-invalid]")) node.removeAttribute("aria-invalid");
  const unplaced = [];
  for (const issue of issues) {
    const key = normalise(issue.key || "");
    // The most specific error slot whose key is a prefix of the issue's key.
    let slot = null;
    let parts = key.split(".");
    while (parts.length && !slot) {
      slot = form.querySelector(`[data-error-for="${CSS.escape(parts.join("."))}"]`);
      parts = parts.slice(0, -1);
    }
    if (!slot) { unplaced.push(issue); continue; }
    slot.hidden = false;
    slot.textContent = slot.textContent ? `${slot.textContent}; ${issue.message}` : issue.message;
    const input = slot.closest(".field, fieldset, .choice-body")?.querySelector("input:not([type=radio]):not([type=checkbox]), select, textarea");
    input?.setAttribute("aria-invalid", "true");
  }
  if (summary) {
    summary.hidden = unplaced.length === 0;
    summary.replaceChildren(...unplaced.map((i) => Regatta.el("div", {}, i.key ? `${i.key}: ` : "", i.message)));
  }
  return unplaced;
};

/** One step of Harbor's ATIF trajectory (system / user / agent, tool calls, observations) as a chat message. */
Regatta.renderStep = function renderStep(step) {
  const { el, fmt } = Regatta;
  const text = (content) => {
    if (content === null || content === undefined) return "";
    if (typeof content === "string") return content;
    if (Array.isArray(content)) return content.map((part) => part.text ?? (part.source ? `[${part.type}: ${part.source.path}]` : "")).join("\n");
    return JSON.stringify(content, null, 2);
  };
  const source = ["system", "user", "agent"].includes(step.source) ? step.source : (step.source === "assistant" ? "agent" : "system");
  const head = el("div", { class: "msg-head" }, el("span", {}, typeof step.source === "string" ? step.source : "message"),
    typeof step.model_name === "string" ? el("span", {}, step.model_name) : null,
    typeof step.timestamp === "string" ? el("span", {}, fmt.local(step.timestamp)) : null);
  const message = el("div", { class: `msg msg-${source}` }, head);
  const bodyText = text(step.message);
  if (bodyText) message.append(el("div", { class: "msg-body" }, bodyText));
  if (step.reasoning_content) message.append(el("details", {}, el("summary", {}, "Reasoning"), el("pre", {}, text(step.reasoning_content))));
  for (const call of Array.isArray(step.tool_calls) ? step.tool_calls : []) {
    message.append(el("pre", {}, `→ ${call?.function_name}(${JSON.stringify(call?.arguments ?? {}, null, 2)})`));
  }
  for (const observation of Array.isArray(step.observation?.results) ? step.observation.results : []) {
    message.append(el("pre", {}, `← ${text(observation?.content)}`));
  }
  if (step.metrics && typeof step.metrics === "object") {
    const m = step.metrics;
    const bits = [m.prompt_tokens != null && `${m.prompt_tokens} prompt`, m.completion_tokens != null && `${m.completion_tokens} completion`,
      m.cost_usd != null && fmt.money(m.cost_usd)].filter(Boolean);
    if (bits.length) message.append(el("div", { class: "muted small" }, bits.join(" · ")));
  }
  return message;
};

/** A whole trajectory (ATIF steps, or a plain list of chat messages) as a conversation. */
Regatta.renderTrajectory = function renderTrajectory(trajectory) {
  const { el } = Regatta;
  const box = el("div", { class: "conversation", "data-testid": "conversation" });
  const steps = Array.isArray(trajectory?.steps) ? trajectory.steps
    : Array.isArray(trajectory?.messages) ? trajectory.messages.map((m) => ({ source: m.role, message: m.content }))
    : Array.isArray(trajectory) ? trajectory.map((m) => ({ source: m.role || m.source, message: m.content ?? m.message })) : null;
  if (!steps) { box.append(el("pre", {}, JSON.stringify(trajectory, null, 2))); return box; }
  for (const step of steps) box.append(Regatta.renderStep(step ?? {}));
  if (!steps.length) box.append(el("p", { class: "muted" }, "The trajectory has no steps."));
  return box;
};
