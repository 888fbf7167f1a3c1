/* Settings pages: every change goes through /api/v1 (the same rules as the CLI and scripts); the list it
 * changed is then redrawn from the server (?fragment=), so what is shown is what was recorded. Tokens and
 * webhook signing secrets are shown once, in a box outside the redrawn list. */
"use strict";

(() => {
  const { api, errorText, toast, refreshRegions, copyText } = Regatta;
  const root = document.querySelector(".settings");
  if (!root) return;
  const workspaceId = root.dataset.workspaceId;
  const workspaceName = root.dataset.workspaceName;
  const workspacePath = `/api/v1/workspaces/${encodeURIComponent(workspaceId)}`;

  function fail(form, result, fallback) {
    const issues = result.data.issues || (result.data.field ? [{ key: result.data.field, message: errorText(result) }] : []);
    const unplaced = Regatta.showIssues(form, issues, null);
    const box = form.querySelector("[data-form-error]");
    if (box && (unplaced.length || !issues.length)) {
      box.textContent = errorText(result, fallback);
      box.hidden = false;
    } else if (!box && (unplaced.length || !issues.length)) {
      toast(errorText(result, fallback));
    }
  }

  function clearErrors(form) {
    Regatta.showIssues(form, [], null);
    const box = form.querySelector("[data-form-error]");
    if (box) box.hidden = true;
  }

  function showOnce(id, value) {
    const box = document.getElementById(id);
    box.querySelector("[data-secret-value]").textContent = value;
    box.hidden = false;
  }

  async function submitting(form, work) {
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    try { await work(); } finally { button.disabled = false; }
  }

  const forms = {
    async budget(form) {
      const raw = form.elements.budget_usd.value.trim();
      const value = raw === "" ? null : Number(raw);
      if (value !== null && (!Number.isFinite(value) || value < 0)) {
        Regatta.showIssues(form, [{ key: "budget_usd", message: "Enter an amount of 0 or more, or leave it empty." }], null);
        return;
      }
      const result = await api("/api/v1/workspace/budget", { method: "PUT", body: { budget_usd: value } });
      if (!result.ok) { fail(form, result, "Could not set the budget"); return; }
      clearErrors(form);
      await refreshRegions(["budget"]);
      toast(value === null ? "Budget removed" : "Budget saved");
    },
    async rename(form) {
      const name = form.elements.name.value.trim();
      if (!name) { Regatta.showIssues(form, [{ key: "name", message: "Enter a name." }], null); return; }
      const result = await api(workspacePath, { method: "PATCH", body: { name } });
      if (!result.ok) { fail(form, result, "Could not rename the workspace"); return; }
      location.reload();
    },
    async "add-member"(form) {
      const email = form.elements.email.value.trim();
      if (!email.includes("@")) { Regatta.showIssues(form, [{ key: "email", message: "Enter an email address." }], null); return; }
      const result = await api(`${workspacePath}/members`, { method: "POST", body: { email, role: form.elements.role.value } });
      if (!result.ok) { fail(form, result, "Could not add the member"); return; }
      clearErrors(form);
      form.reset();
      await refreshRegions(["members"]);
      toast(`${email} added`);
    },
    async token(form) {
      const name = form.elements.name.value.trim();
      if (!name) { Regatta.showIssues(form, [{ key: "name", message: "Name the token (say, where it is used)." }], null); return; }
      const body = { name };
      const days = Number(form.elements.expires.value);
      if (days) body.expires_in_seconds = days * 24 * 3600;
      const result = await api("/api/v1/tokens", { method: "POST", body });
      if (!result.ok) { fail(form, result, "Could not create the token"); return; }
      clearErrors(form);
      form.elements.name.value = "";
      showOnce("new-token", result.data.token);
      await refreshRegions(["tokens"]);
    },
    async webhook(form) {
      const url = form.elements.url.value.trim();
      const kinds = [...form.querySelectorAll("input[name=kinds]:checked")].map((box) => box.value);
      const issues = [];
      if (!/^https?:\/\/\S+$/.test(url)) issues.push({ key: "url", message: "Enter an http(s) URL." });
      if (!kinds.length) issues.push({ key: "kinds", message: "Choose at least one event." });
      if (issues.length) { Regatta.showIssues(form, issues, null); return; }
      const result = await api("/api/v1/webhooks", { method: "POST", body: { url, kinds } });
      if (!result.ok) { fail(form, result, "Could not add the webhook"); return; }
      clearErrors(form);
      form.elements.url.value = "";
      showOnce("new-secret", result.data.signing_secret);
      await refreshRegions(["webhooks"]);
    },
  };

  document.addEventListener("submit", (event) => {
    const form = event.target.closest("form[data-form]");
    const handler = form && forms[form.dataset.form];
    if (!handler) return;
    event.preventDefault();
    submitting(form, () => handler(form));
  });

  async function act(button, request, fallback, after) {
    button.disabled = true;
    const result = await request();
    if (!result.ok) { button.disabled = false; toast(errorText(result, fallback)); return false; }
    await after(result);
    return true;
  }

  document.addEventListener("click", async (event) => {
    const target = event.target;
    const copy = target.closest("[data-copy-secret]");
    if (copy) {
      const value = copy.parentElement.querySelector("[data-secret-value]").textContent;
      await copyText(value);
      return;
    }
    const removeMember = target.closest("[data-remove-member]");
    if (removeMember) {
      const row = removeMember.closest("tr");
      const self = row.dataset.userId === root.dataset.userId;
      const question = self ? `Leave ${workspaceName}? You lose access to its benchmarks and runs.` : `Remove ${row.dataset.email} from ${workspaceName}?`;
      if (!window.confirm(question)) return;
      await act(removeMember, () => api(`${workspacePath}/members/${encodeURIComponent(row.dataset.userId)}`, { method: "DELETE" }),
        "Could not remove the member", async () => {
          if (self) { location.assign("/benchmarks"); return; }
          await refreshRegions(["members"]);
          toast(`${row.dataset.email} removed`);
        });
      return;
    }
    const revoke = target.closest("[data-revoke-token]");
    if (revoke) {
      const row = revoke.closest("tr");
      const note = row.hasAttribute("data-session") ? " You are signed in with it: you will be signed out." : "";
      if (!window.confirm(`Revoke the token "${row.dataset.tokenName}"? Anything using it stops working.${note}`)) return;
      await act(revoke, () => api(`/api/v1/tokens/${encodeURIComponent(row.dataset.tokenId)}`, { method: "DELETE" }),
        "Could not revoke the token", async () => { await refreshRegions(["tokens"]); toast(`Token ${row.dataset.tokenName} revoked`); });
      return;
    }
    const removeHook = target.closest("[data-remove-webhook]");
    if (removeHook) {
      const row = removeHook.closest("tr");
      if (!window.confirm("Remove this webhook? Nothing more is sent to it.")) return;
      await act(removeHook, () => api(`/api/v1/webhooks/${encodeURIComponent(row.dataset.webhookId)}`, { method: "DELETE" }),
        "Could not remove the webhook", async () => {
          // Its delivery log is open: that view is gone with it.
          if (new URLSearchParams(location.search).get("webhook") === row.dataset.webhookId) {
            location.assign("/settings/webhooks");
            return;
          }
          await refreshRegions(["webhooks"]);
          toast("Webhook removed");
        });
      return;
    }
    const remove = target.closest("[data-delete-workspace]");
    if (remove) {
      const runs = Number(remove.dataset.runCount || 0);
      let confirm = null;
      if (runs) {
        confirm = window.prompt(`${workspaceName} has ${runs} run${runs === 1 ? "" : "s"}. Type the workspace's name to delete it for every member.`);
        if (confirm === null) return;
        if (confirm !== workspaceName) { toast("The name did not match: nothing was deleted."); return; }
      } else if (!window.confirm(`Delete ${workspaceName} for every member?`)) {
        return;
      }
      const query = confirm ? `?confirm=${encodeURIComponent(confirm)}` : "";
      await act(remove, () => api(`${workspacePath}${query}`, { method: "DELETE" }), "Could not delete the workspace",
        async () => { location.assign("/benchmarks"); });
    }
  });

  document.addEventListener("change", async (event) => {
    const select = event.target.closest("select[data-member-role]");
    if (!select) return;
    const row = select.closest("tr");
    const previous = [...select.options].find((option) => option.defaultSelected)?.value;
    select.disabled = true;
    const result = await api(`${workspacePath}/members/${encodeURIComponent(row.dataset.userId)}`, { method: "PATCH", body: { role: select.value } });
    select.disabled = false;
    if (!result.ok) {
      if (previous) select.value = previous;
      toast(errorText(result, "Could not change the role"));
      return;
    }
    if (row.dataset.userId === root.dataset.userId) { location.reload(); return; } // own rights changed
    await refreshRegions(["members"]);
    toast(`${row.dataset.email} is now ${select.value === "admin" ? "an admin" : "a member"}`);
  });
})();
