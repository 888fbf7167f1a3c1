/* New Run form: builds the submission body of POST /api/v1/runs (contract §4.4), keeps a live summary,
 * flags secret records the agents reference that the workspace lacks, and places server issues next to
 * the fields they name. */
"use strict";

(() => {
  const { api, el, errorText, toast } = Regatta;
  const data = JSON.parse(document.getElementById("new-run-data").textContent);
  const bm = data.benchmark;
  const form = document.getElementById("new-run");
  const agentsBox = document.getElementById("agents");
  const template = document.getElementById("agent-template");
  const summary = document.getElementById("summary");
  const flags = document.getElementById("secret-flags");
  const submitError = document.getElementById("submit-error");
  const submitWarning = document.getElementById("submit-warning");
  const formError = document.getElementById("form-error");
  const preview = document.getElementById("request-preview");
  const MAX_AGENTS = 8;
  const PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#882255", "#444444"];
  let harnesses = data.harnesses;
  let secrets = data.secrets;

  // --- tasks ------------------------------------------------------------------------------------------
  const taskList = document.getElementById("task-list");
  taskList.replaceChildren(...bm.tasks.map((task) =>
    el("label", { class: "check", dataset: { name: task.name.toLowerCase() } },
      el("input", { type: "checkbox", name: "task_name", value: task.name }), " ", task.name,
      task.category ? el("span", { class: "muted small" }, ` ${task.category}`) : null)));
  document.getElementById("task-filter").addEventListener("input", (event) => {
    const q = event.target.value.trim().toLowerCase();
    for (const label of taskList.children) label.hidden = q !== "" && !label.dataset.name.includes(q);
  });
  document.getElementById("task-clear").addEventListener("click", () => {
    for (const box of taskList.querySelectorAll("input:checked")) box.checked = false;
    update();
  });

  const taskMode = () => form.querySelector("input[name=task_mode]:checked").value;
  function syncTaskMode() {
    for (const body of form.querySelectorAll(".choice-body[data-mode]")) body.hidden = body.dataset.mode !== taskMode();
    // "Ranks like a full run" is said of the benchmark's recommended set only.
    const chosenSet = document.getElementById("task-set")?.selectedOptions[0];
    const recommended = chosenSet ? chosenSet.hasAttribute("data-recommended") : false;
    for (const hint of form.querySelectorAll("[data-hint]")) {
      hint.hidden = hint.dataset.hint !== (recommended ? "recommended" : "other");
    }
  }

  function selection() {
    const mode = taskMode();
    if (mode === "task_set") {
      const select = document.getElementById("task-set");
      return { config: { task_set: select.value }, text: `task set ${select.value}` };
    }
    if (mode === "categories") {
      const chosen = Array.from(form.querySelectorAll("input[name=category]:checked"));
      return { config: { categories: chosen.map((box) => box.value) }, text: chosen.length ? `${chosen.length === 1 ? "category" : "categories"} ${chosen.map((b) => b.value).join(", ")}` : "no category chosen" };
    }
    if (mode === "task_names") {
      const chosen = Array.from(taskList.querySelectorAll("input:checked")).map((box) => box.value);
      // An empty list selects nothing out: the server counts (and a submission runs) every task.
      return { config: { task_names: chosen }, text: chosen.length ? chosen.join(", ") : "no task named, so every task" };
    }
    return { config: null, text: "all tasks" };
  }

  // --- agents -----------------------------------------------------------------------------------------
  function harnessInfo(name) {
    return harnesses.find((h) => h.name === name);
  }
  function fillHarnesses(select, value) {
    const options = [];
    if (bm.default_harness) options.push(el("option", { value: "" }, `Benchmark default (${bm.default_harness})`));
    else options.push(el("option", { value: "", disabled: true }, "Choose a harness…"));
    for (const h of harnesses) options.push(el("option", { value: h.name }, h.name));
    select.replaceChildren(...options);
    select.value = value ?? "";
    if (select.selectedIndex < 0) select.value = "";
  }

  // The deployment's hosted models (REGATTA_HOSTED_MODELS): without any, the form has no hosted type.
  const hostedModels = data.hosted_models || [];
  function fillAdapters(card) {
    const chosen = hostedModels.find((m) => m.name === card.querySelector("[data-f=base_model]").value);
    const select = card.querySelector("[data-f=lora_model_name]");
    const current = select.value;
    select.replaceChildren(el("option", { value: "" }, "None (the base model)"),
      ...(chosen ? chosen.lora_adapters : []).map((name) => el("option", { value: name }, name)));
    select.value = current;
    if (select.selectedIndex < 0) select.value = "";
  }

  function showModelFields(card) {
    const type = card.querySelector("[data-f=model_type]").value;
    for (const field of card.querySelectorAll("[data-model]")) field.hidden = !field.dataset.model.split(" ").includes(type);
  }

  function onHarnessChange(card) {
    const name = card.querySelector("[data-f=harness]").value || bm.default_harness || "";
    const info = harnessInfo(name);
    const hint = card.querySelector("[data-harness-hint]");
    const parts = [];
    if (info?.description) parts.push(info.description);
    if (info && info.needs_model === false) parts.push("Calls no model: any model entry works.");
    else if (info?.keys?.length) parts.push(`Needs: ${info.keys.join(", ")}`);
    hint.textContent = parts.join(". ");
    // A harness that calls no model still needs a model entry (the schema requires one): "None" sends a
    // placeholder that asks for no API-key secret it would never use. Only such harnesses offer it.
    const type = card.querySelector("[data-f=model_type]");
    const noModel = type.querySelector("[data-no-model]");
    const callsNoModel = Boolean(info && info.needs_model === false);
    noModel.hidden = noModel.disabled = !callsNoModel;
    if (callsNoModel && type.value === "provider" && !card.querySelector("[data-f=model]").value.trim()) type.value = "none";
    if (!callsNoModel && type.value === "none") type.value = "provider";
    showModelFields(card);
  }

  function renumber() {
    const cards = Array.from(agentsBox.querySelectorAll("[data-agent]"));
    cards.forEach((card, index) => {
      const title = card.querySelector("[data-agent-title]");
      title.textContent = `Agent ${index + 1}`;
      title.id = `agent-${index}-title`;
      card.setAttribute("aria-labelledby", title.id);
      card.querySelector("[data-remove-agent]").setAttribute("aria-label", `Remove agent ${index + 1}`);
      card.querySelector(".swatch").style.background = PALETTE[index % PALETTE.length];
      card.querySelector("[data-remove-agent]").hidden = cards.length === 1;
      for (const slot of card.querySelectorAll("[data-error-for]")) {
        slot.dataset.relative = slot.dataset.relative || slot.dataset.errorFor;
        slot.dataset.errorFor = `agents.${index}.${slot.dataset.relative}`;
      }
      // Unique ids so every label names its control (the template has none).
      for (const label of card.querySelectorAll("label[data-for]")) {
        const input = card.querySelector(`[data-f="${label.dataset.for}"]`);
        const id = `agent-${index}-${label.dataset.for}`;
        if (input) { input.id = id; label.htmlFor = id; }
      }
    });
    document.getElementById("add-agent").disabled = cards.length >= MAX_AGENTS;
  }

  function addAgent(values = {}) {
    const card = template.content.firstElementChild.cloneNode(true);
    fillHarnesses(card.querySelector("[data-f=harness]"), values.harness ?? (bm.default_harness ? "" : null));
    card.querySelector("[data-f=model_type]").value = values.model_type || "provider";
    for (const [key, value] of Object.entries(values)) {
      const input = card.querySelector(`[data-f="${key}"]`);
      if (input && key !== "harness" && key !== "model_type") input.value = value;
    }
    fillAdapters(card);
    agentsBox.append(card);
    showModelFields(card);
    onHarnessChange(card);
    renumber();
    update();
    return card;
  }

  agentsBox.addEventListener("change", (event) => {
    const card = event.target.closest("[data-agent]");
    if (!card) return;
    if (event.target.matches("[data-f=model_type]")) showModelFields(card);
    if (event.target.matches("[data-f=base_model]")) fillAdapters(card);
    if (event.target.matches("[data-f=harness]")) onHarnessChange(card);
    update();
  });
  agentsBox.addEventListener("click", (event) => {
    const remove = event.target.closest("[data-remove-agent]");
    if (!remove) return;
    const cards = agentsBox.querySelectorAll("[data-agent]");
    if (cards.length <= 1) return;
    const card = remove.closest("[data-agent]");
    const next = card.nextElementSibling || card.previousElementSibling;
    card.remove();
    renumber();
    update();
    next?.querySelector("select, input")?.focus();
  });
  document.getElementById("add-agent").addEventListener("click", () => {
    const card = addAgent();
    card.querySelector("select")?.focus();
  });

  function parseEnv(text) {
    const env = {};
    for (const line of text.split("\n")) {
      const trimmed = line.trim();
      if (!trimmed || trimmed.startsWith("#")) continue;
      const at = trimmed.indexOf("=");
      if (at < 1) { env[trimmed] = ""; continue; } // let the server name the bad line
      env[trimmed.slice(0, at).trim()] = trimmed.slice(at + 1);
    }
    return env;
  }

  function agentBody(card) {
    const value = (key) => card.querySelector(`[data-f="${key}"]`).value.trim();
    const type = value("model_type");
    const model = { type };
    if (type === "provider") Object.assign(model, { model: value("model"), api_key_secret: value("api_key_secret") });
    if (type === "endpoint") Object.assign(model, { base_url: value("base_url"), model: value("model"), api_key_secret: value("api_key_secret") });
    if (type === "hosted") Object.assign(model, { base_model: value("base_model"), lora_model_name: value("lora_model_name") });
    if (type === "none") Object.assign(model, { type: "hosted", base_model: "none", lora_model_name: "" });
    const body = { model, env: parseEnv(card.querySelector("[data-f=env]").value) };
    if (value("harness")) body.harness = value("harness");
    if (value("harness_api_key_secret")) body.harness_api_key_secret = value("harness_api_key_secret");
    return body;
  }

  function agentLabel(card) {
    const body = agentBody(card);
    const harness = body.harness || bm.default_harness || "harness not chosen";
    // The same label as every other page (regatta_shared.rules.participants.agent_label): a harness that calls no
    // model is named alone, whatever model it names; a hosted LoRA reads `base:lora`.
    if (harnessInfo(harness)?.needs_model === false) return harness;
    const hosted = body.model.type === "hosted";
    const lora = hosted ? body.model.lora_model_name : "";
    const model = hosted ? `${body.model.base_model || ""}${lora ? `:${lora}` : ""}` : body.model.model || "";
    return model ? `${harness} · ${model}` : harness;
  }

  // --- settings -----------------------------------------------------------------------------------------
  const NUMBER_SETTINGS = ["attempts_per_task", "max_concurrent_attempts", "timeout_multiplier", "max_retries", "pass_threshold", "cost_cap_usd"];
  function execution() {
    const config = {};
    for (const input of form.querySelectorAll("[data-setting]")) {
      const key = input.dataset.setting;
      const raw = input.value.trim();
      if (raw === "") {
        // A number field the browser could not parse reads as "" yet is invalid: say so instead of
        // silently submitting the default.
        if (input.validity && input.validity.badInput) config[key] = "not a number";
        continue;
      }
      config[key] = NUMBER_SETTINGS.includes(key) && !Number.isNaN(Number(raw)) ? Number(raw) : raw;
    }
    return config;
  }

  function body() {
    const request = {
      experiment_config: { benchmark: bm.id },
      agents: Array.from(agentsBox.querySelectorAll("[data-agent]")).map(agentBody),
    };
    const chosen = selection();
    if (chosen.config) request.tasks_config = chosen.config;
    const config = execution();
    if (Object.keys(config).length) request.execution_config = config;
    const name = document.getElementById("s-name").value.trim();
    if (name) request.name = name;
    return request;
  }

  // --- secrets -----------------------------------------------------------------------------------------
  function referencedSecrets() {
    const references = [];
    for (const input of form.querySelectorAll("[data-secret-input]")) {
      if (input.closest("[hidden]")) continue;
      const name = input.value.trim();
      if (!name) continue;
      const card = input.closest("[data-agent]");
      const where = card ? card.querySelector("[data-agent-title]").textContent : "Judge";
      references.push({ name, where, input });
    }
    return references;
  }

  function secretScope(name) {
    const found = secrets.filter((s) => s.name === name);
    if (found.some((s) => s.scope === "user")) return "personal";
    if (found.some((s) => s.scope === "workspace")) return "workspace";
    return null;
  }

  function renderSecretFlags(references) {
    for (const input of form.querySelectorAll("[data-secret-input]")) {
      const status = input.closest(".field").querySelector("[data-secret-status]");
      const name = input.value.trim();
      if (!name || input.closest("[hidden]")) { status.textContent = ""; status.className = "secret-status small"; continue; }
      const scope = secretScope(name);
      status.className = `secret-status small ${scope ? "secret-ok" : "secret-missing"}`;
      status.textContent = scope ? `✓ found (${scope} record)` : "✗ no such secret record in this workspace";
    }
    const missing = [...new Set(references.filter((r) => !secretScope(r.name)).map((r) => r.name))];
    // Errors from an earlier refused submission about secrets that now exist are stale.
    for (const slot of form.querySelectorAll("[data-error-for]:not([hidden])")) {
      const named = slot.textContent.match(/Secret\(s\) not found: (.*)/);
      if (named && named[1].split(/,\s*/).every((name) => secretScope(name))) {
        slot.hidden = true;
        slot.textContent = "";
        slot.closest(".field")?.querySelector("[aria-invalid]")?.removeAttribute("aria-invalid");
      }
    }
    if (!missing.length && submitError.dataset.kind === "secrets") { submitError.hidden = true; submitError.dataset.kind = ""; }
    if (!missing.length) {
      flags.replaceChildren(references.length ? el("p", { class: "small secret-ok" }, `✓ All ${new Set(references.map((r) => r.name)).size} referenced secret record(s) exist.`) : "");
      return missing;
    }
    flags.replaceChildren(el("div", { class: "alert alert-warning", role: "alert", "data-testid": "missing-secrets" },
      el("strong", {}, "Missing secret records"),
      el("ul", {}, missing.map((name) => el("li", {},
        el("span", { class: "mono" }, name), " ",
        el("span", { class: "muted small" }, `(${references.filter((r) => r.name === name).map((r) => r.where).join(", ")})`), " · ",
        el("a", { href: `/secrets?name=${encodeURIComponent(name)}`, target: "_blank", rel: "noopener" }, "create")))),
      el("p", { class: "small" }, "Create them in Secrets, then recheck. The run cannot start without them."),
      el("button", { type: "button", class: "btn btn-small", id: "recheck-secrets" }, "Recheck secrets")));
    return missing;
  }

  async function recheckSecrets() {
    // The secrets API when the gateway has it; otherwise this page's own read of the secret names.
    let response = await api("/api/v1/secrets?scope=all&limit=200");
    let list = response.ok ? (response.data.secrets || response.data.environment_secrets || response.data.items) : null;
    if (!Array.isArray(list)) {
      response = await api(`${location.pathname}?fragment=secrets`);
      list = response.ok ? response.data.secrets : null;
    }
    if (Array.isArray(list)) {
      secrets = list.map((s) => ({ name: s.name, scope: s.scope === "personal" ? "user" : s.scope }));
      update();
    }
  }
  flags.addEventListener("click", async (event) => {
    if (!event.target.closest("#recheck-secrets")) return;
    await recheckSecrets();
    toast("Secret records rechecked");
  });
  // Coming back from the Secrets tab: re-check without being asked.
  window.addEventListener("focus", () => recheckSecrets());

  // --- judge ---------------------------------------------------------------------------------------------
  // A benchmark whose judge needs a key (or a model) flags the empty field as soon as the form shows,
  // rather than after a refused submission; the flag on the Settings tab points there from any tab.
  function flagRequiredJudge() {
    for (const [id, key, needed, message] of [
      ["s-judge-secret", "execution.judge_api_key_secret", bm.requires_judge_api_key, "Required: this benchmark's LLM judge needs an API key secret."],
      ["s-judge-model", "execution.judge_model", bm.requires_judge_model, "Required: this benchmark's LLM judge needs a model."],
    ]) {
      const input = document.getElementById(id);
      const slot = form.querySelector(`[data-error-for="${key}"]`);
      if (!input || !slot || !needed) continue;
      const empty = input.value.trim() === "";
      if (empty && (slot.hidden || slot.dataset.required)) {
        slot.textContent = message;
        slot.hidden = false;
        slot.dataset.required = "true";
        input.setAttribute("aria-invalid", "true");
      } else if (slot.dataset.required) {
        slot.hidden = true;
        delete slot.dataset.required;
        input.removeAttribute("aria-invalid");
      }
    }
  }

  // --- summary ------------------------------------------------------------------------------------------
  const plural = (count, word) => `${count} ${word}${count === 1 ? "" : "s"}`;

  // The attempt count is the server's (POST /api/v1/runs/preview: the submission's own task selection and
  // settings, the scheduler's count), never worked out here; only the latest answer is shown.
  let counted = null;
  let asked = 0;
  let waiting = null;
  async function askCount() {
    const mine = ++asked;
    const result = await api("/api/v1/runs/preview", { method: "POST", body: body() });
    if (mine !== asked) return;
    const issue = result.ok ? null : (result.data.issues || [])[0];
    const refused = issue ? `${normalise(issue.key)}: ${issue.message}` : errorText(result);
    counted = result.ok ? result.data : { refused };
    renderSummary();
  }

  function renderSummary() {
    const chosen = selection();
    const cards = Array.from(agentsBox.querySelectorAll("[data-agent]"));
    const count = counted && !counted.refused ? counted : null;
    let tasks = `… (${chosen.text})`;
    let total = "Counting attempts…";
    let perTask = "…";
    if (count) {
      tasks = count.tasks ? `${plural(count.tasks, "task")} (${chosen.text})` : `no task (${chosen.text})`;
      perTask = `${plural(count.attempts_per_task, "attempt")} per task`;
      total = `${plural(count.tasks, "task")} × ${plural(count.agents, "agent")} × ${plural(count.attempts_per_task, "attempt")} = ${plural(count.expected_attempts, "attempt")}`;
    } else if (counted) {
      // Not counted (the issue is said below): what was selected, never "none" for a valid selection.
      tasks = `${chosen.text} (not counted: a setting has an issue)`;
      total = `No attempts: ${counted.refused}`;
    }
    const parts = [
      el("dl", { class: "summary-list" },
        el("dt", {}, "Benchmark"), el("dd", {}, bm.name),
        el("dt", {}, "Tasks"), el("dd", { "data-testid": "summary-tasks" }, tasks),
        el("dt", {}, "Agents"), el("dd", {}, cards.length ? el("ol", { class: "plain-list" }, cards.map((card) => el("li", {}, agentLabel(card)))) : "none"),
        el("dt", {}, "Attempts"), el("dd", {}, perTask)),
      el("p", { class: "summary-total", "data-testid": "summary-total" }, total),
    ];
    // replaceChildren() writes a null argument as the text "null": only real nodes are passed.
    if (count && count.tasks > 1) parts.push(el("button", { type: "button", class: "btn btn-small", id: "one-task", title: "Select a single task to check agents and secrets cheaply" }, "Try one task first"));
    summary.replaceChildren(...parts);
  }

  function update() {
    syncTaskMode();
    const references = referencedSecrets();
    renderSummary();
    clearTimeout(waiting);
    waiting = setTimeout(askCount, 150);
    flagRequiredJudge();
    renderSecretFlags(references);
    flagTabs();
    preview.textContent = JSON.stringify(body(), null, 2);
  }
  summary.addEventListener("click", (event) => {
    if (!event.target.closest("#one-task")) return;
    form.querySelector("input[name=task_mode][value=task_names]").checked = true;
    for (const box of taskList.querySelectorAll("input")) box.checked = false;
    const first = taskList.querySelector("input");
    if (first) first.checked = true;
    Regatta.selectTab(document.querySelector("[data-tabs]"), document.getElementById("tab-tasks"));
    update();
  });
  // Editing a field withdraws the error shown for it: the message described the old value.
  function clearFieldError(input) {
    const slot = input.closest(".field, .choice-body, fieldset")?.querySelector("[data-error-for]:not([hidden])");
    if (slot) { slot.hidden = true; slot.textContent = ""; }
    input.removeAttribute("aria-invalid");
  }
  form.addEventListener("input", (event) => { clearFieldError(event.target); update(); });
  form.addEventListener("change", (event) => { clearFieldError(event.target); update(); });

  // --- submit ----------------------------------------------------------------------------------------------
  const normalise = (key) => key
    .replace(/^experiment_config\./, "experiment.")
    .replace(/^execution_config\./, "execution.")
    .replace(/^tasks_config\./, "tasks.")
    .replace(/^(agents\.\d+\.model)\.(provider|endpoint|hosted)(\.|$)/, "$1$3");

  function flagTabs() {
    let first = null;
    for (const tab of form.querySelectorAll('[role="tab"]')) {
      const panelBox = document.getElementById(tab.getAttribute("aria-controls"));
      const bad = Array.from(panelBox.querySelectorAll("[data-error-for]")).some((slot) => !slot.hidden);
      tab.querySelector(".tab-flag").hidden = !bad;
      if (bad && !first) first = tab;
    }
    return first;
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = document.getElementById("submit-run");
    submitError.hidden = true;
    submitWarning.hidden = true;
    formError.hidden = true;
    button.disabled = true;
    button.textContent = "Submitting…";
    submitError.dataset.kind = "";
    const result = await api("/api/v1/runs", { method: "POST", body: body() });
    if (result.ok) {
      button.textContent = "Submitted";
      const runPage = `/benchmarks/runs/${encodeURIComponent(result.data.id)}`;
      const warnings = result.data.warnings || [];
      // The run is accepted either way; a warning (a model its harness may not know) is read before leaving.
      if (!warnings.length) { window.location.assign(runPage); return; }
      submitWarning.replaceChildren(el("strong", {}, "Run submitted, with warnings:"),
        el("ul", {}, warnings.map((w) => el("li", {}, w))),
        el("a", { class: "btn btn-small", href: runPage, "data-testid": "open-run" }, "Open the run"));
      submitWarning.hidden = false;
      return;
    }
    button.disabled = false;
    button.textContent = "Submit run";
    const payload = result.data || {};
    let issues = payload.issues || [];
    if (!issues.length && payload.field) issues = [{ key: payload.field, message: errorText(result) }];
    Regatta.showIssues(form, issues, formError, normalise);
    for (const slot of form.querySelectorAll("[data-required]")) delete slot.dataset.required;
    flagRequiredJudge();
    const badTab = flagTabs();
    if (badTab) Regatta.selectTab(document.querySelector("[data-tabs]"), badTab);
    if (result.status === 403 && payload.code === "BILLING_REQUIRED") {
      submitError.replaceChildren(el("strong", {}, "Budget required. "), errorText(result),
        el("div", { class: "small" }, "The workspace has no budget left for this run; nothing was submitted."));
    } else if (Array.isArray(payload.missing_secrets) && payload.missing_secrets.length) {
      submitError.replaceChildren(el("strong", {}, "Missing secrets. "), errorText(result));
      submitError.dataset.kind = "secrets";
      await recheckSecrets();
    } else {
      submitError.replaceChildren(el("strong", {}, issues.length ? "Fix the highlighted fields. " : "Not submitted. "), errorText(result));
    }
    submitError.hidden = false;
  });

  // --- start -----------------------------------------------------------------------------------------------
  async function loadHarnesses() {
    const response = await api("/api/v1/harnesses");
    if (response.ok && Array.isArray(response.data.harnesses)) {
      harnesses = response.data.harnesses;
      for (const card of agentsBox.querySelectorAll("[data-agent]")) {
        const select = card.querySelector("[data-f=harness]");
        fillHarnesses(select, select.value);
        onHarnessChange(card);
      }
    }
  }
  addAgent();
  syncTaskMode();
  update();
  loadHarnesses();
})();
