/* Secrets page: list, set (upsert) and delete secret records through /api/v1/secrets. Values are sent
 * once and never displayed. If the gateway has no secrets API the page says so and stays read-only. */
"use strict";

(() => {
  const { api, el, errorText, fmt, toast } = Regatta;
  const form = document.getElementById("secret-form");
  const bodyRows = document.getElementById("secrets-body");
  const unavailable = document.getElementById("secrets-unavailable");
  const formError = form.querySelector("[data-form-error]");
  const NAME = /^[A-Z][A-Z0-9_]*$/;
  let available = unavailable.hidden;

  // Route-level 404/405 (no such route) carry FastAPI's {"detail": ...}; the API's own errors carry a code.
  const noRoute = (result) => [404, 405].includes(result.status) && typeof result.data?.detail === "string" && !result.data?.code;

  function markUnavailable() {
    available = false;
    unavailable.hidden = false;
    form.querySelector("button[type=submit]").disabled = true;
    for (const button of bodyRows.querySelectorAll("[data-delete-secret]")) button.remove();
  }

  function render(items) {
    const rows = items.map((s) => {
      const scope = s.scope === "workspace" ? "workspace" : "user";
      const updated = s.updated_at || s.created_at;
      return el("tr", { dataset: { name: s.name, scope } },
        el("td", { class: "mono strong" }, s.name),
        el("td", {}, scope === "workspace" ? "Workspace" : "Personal"),
        el("td", {}, updated ? el("time", { datetime: updated, "data-rel": "", title: updated }, fmt.ago(updated)) : "—"),
        el("td", {}, s.updater_name || s.creator_name || "—"),
        el("td", { class: "cell-actions" }, el("button", { type: "button", class: "btn btn-small btn-danger-outline", "data-delete-secret": "" }, "Delete")));
    });
    bodyRows.replaceChildren(...(rows.length ? rows : [el("tr", { class: "empty" }, el("td", { colspan: "5" }, "No secret records yet."))]));
  }

  async function load() {
    const result = await api("/api/v1/secrets?scope=all&limit=200");
    if (noRoute(result)) { markUnavailable(); return; }
    if (!result.ok) { toast(errorText(result, "Could not list secrets")); return; }
    const items = result.data.secrets || result.data.environment_secrets || result.data.items || [];
    render(items);
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const name = form.elements.name.value.trim();
    const value = form.elements.value.value;
    const scope = form.elements.scope.value;
    const issues = [];
    if (!NAME.test(name)) issues.push({ key: "name", message: "Use upper case letters, digits and _, starting with a letter." });
    if (!value) issues.push({ key: "value", message: "Enter the secret's value." });
    Regatta.showIssues(form, issues, null);
    if (issues.length) { form.querySelector("[aria-invalid]")?.focus(); return; }
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    const result = await api("/api/v1/secrets", { method: "POST", body: { name, value, scope } });
    button.disabled = false;
    if (noRoute(result)) { markUnavailable(); return; }
    if (!result.ok) {
      const serverIssues = result.data.issues || (result.data.field ? [{ key: result.data.field, message: errorText(result) }] : []);
      Regatta.showIssues(form, serverIssues, null);
      formError.textContent = errorText(result, "Could not save the secret");
      formError.hidden = false;
      return;
    }
    formError.hidden = true;
    form.elements.value.value = ""; // never keep a value on screen longer than needed
    toast(`Secret ${name} saved (${scope === "workspace" ? "workspace" : "personal"})`);
    await load();
  });

  bodyRows.addEventListener("click", async (event) => {
    const button = event.target.closest("[data-delete-secret]");
    if (!button) return;
    const row = button.closest("tr");
    const { name, scope } = row.dataset;
    const label = scope === "workspace" ? "workspace" : "personal";
    if (!window.confirm(`Delete the ${label} secret ${name}? Runs that reference it will not start.`)) return;
    button.disabled = true;
    const result = await api("/api/v1/secrets", { method: "DELETE", body: { name, scope } });
    if (noRoute(result)) { markUnavailable(); return; }
    if (!result.ok) { button.disabled = false; toast(errorText(result, "Could not delete the secret")); return; }
    toast(`Secret ${name} deleted`);
    await load();
  });

  if (available) load();
})();
