/* An attempt's page: its live output, trajectory steps, phase and elapsed time from the gateway's SSE
 * stream. */
"use strict";

(() => {
  const data = JSON.parse(document.getElementById("attempt-data").textContent);
  const output = document.querySelector("[data-testid=live-output]");
  const phase = document.querySelector("[data-testid=attempt-phase]");
  const badge = document.querySelector("[data-testid=attempt-state]");
  const elapsed = document.querySelector("[data-testid=attempt-elapsed]");
  const note = document.querySelector("[data-testid=watch-note]");
  const steps = document.querySelector("[data-testid=live-trajectory]");
  const stepsNote = document.querySelector("[data-testid=trajectory-note]");
  const PHASES = { setup: "setting up", agent: "agent running", verifier: "verifying", done: "ended" };
  let lastFile = null;
  let lastSeq = -1; // a reconnected stream starts over: what was shown already is skipped

  function append(file, text) {
    // Stay at the bottom only if the reader is there: scrolling up to read must not be undone.
    const atBottom = output.scrollTop + output.clientHeight >= output.scrollHeight - 4;
    if (file !== lastFile) {
      output.append(Regatta.el("span", { class: "live-file" }, `── ${file} ──\n`));
      lastFile = file;
    }
    // One text node per file section, so a line sent in two chunks is one piece of text.
    if (output.lastChild?.nodeType === Node.TEXT_NODE) output.lastChild.appendData(text);
    else output.append(document.createTextNode(text));
    if (atBottom) output.scrollTop = output.scrollHeight;
  }

  function showStep(index, step) {
    // A step sent again (it changed: an observation came) replaces the one shown at its index.
    const atBottom = steps.scrollTop + steps.clientHeight >= steps.scrollHeight - 4;
    const shown = Regatta.renderStep(step);
    shown.dataset.stepIndex = String(index);
    shown.dataset.testid = "live-step";
    const existing = steps.querySelector(`[data-step-index="${index}"]`);
    if (existing) existing.replaceWith(shown);
    else {
      const after = [...steps.children].find((child) => Number(child.dataset.stepIndex) > index);
      steps.insertBefore(shown, after || null);
    }
    stepsNote.hidden = true;
    if (atBottom) steps.scrollTop = steps.scrollHeight;
  }

  function showStatus(status) {
    const state = status.outcome || status.status || "scheduled";
    badge.textContent = state;
    badge.className = `badge status-${state}`;
    if (status.started_at) {
      elapsed.dataset.duration = "";
      elapsed.dataset.start = status.started_at;
      elapsed.dataset.end = status.finished_at || "";
    }
    if (status.outcome) phase.textContent = PHASES.done;
  }

  // Labels beside the evidence: the run page's label actions (the same API), then the page again, so
  // what it shows is what the server recorded.
  const labelsPath = `/api/v1/runs/${encodeURIComponent(data.run)}/attempts/${encodeURIComponent(data.attempt)}/labels`;
  const labelMessage = document.querySelector("[data-testid=label-message]");
  document.querySelector("[data-label-form]")?.addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = event.currentTarget;
    const sent = await Regatta.api(labelsPath, { method: "POST", body: { label: form.label.value, note: form.note.value } });
    if (!sent.ok) { labelMessage.textContent = Regatta.errorText(sent, "Could not add the label"); return; }
    location.reload();
  });
  for (const button of document.querySelectorAll("[data-remove-label]")) {
    button.addEventListener("click", async () => {
      button.disabled = true;
      const removed = await Regatta.api(`${labelsPath}/${encodeURIComponent(button.dataset.removeLabel)}`, { method: "DELETE" });
      if (!removed.ok) { button.disabled = false; labelMessage.textContent = Regatta.errorText(removed, "Could not remove the label"); return; }
      location.reload();
    });
  }

  if (data.outcome) return; // ended before the page opened: the artifacts hold its output
  const url = `/api/v1/runs/${encodeURIComponent(data.run)}/attempts/${encodeURIComponent(data.attempt)}/live`;
  const source = new EventSource(url);
  source.addEventListener("status", (event) => showStatus(JSON.parse(event.data)));
  source.addEventListener("phase", (event) => {
    const message = JSON.parse(event.data);
    phase.textContent = PHASES[message.phase] || message.phase;
    if (!elapsed.dataset.start && message.phase === "setup") {
      elapsed.dataset.duration = "";
      elapsed.dataset.start = message.at;
    }
  });
  source.addEventListener("output", (event) => {
    const message = JSON.parse(event.data);
    if (message.seq <= lastSeq) return;
    lastSeq = message.seq;
    append(message.file, message.text);
  });
  source.addEventListener("step", (event) => {
    const message = JSON.parse(event.data);
    if (message.seq <= lastSeq) return;
    lastSeq = message.seq;
    showStep(message.index, message.step);
  });
  source.addEventListener("truncated", (event) => {
    const message = JSON.parse(event.data);
    if (message.seq <= lastSeq) return;
    lastSeq = message.seq;
    output.append(Regatta.el("span", { class: "live-truncated", "data-testid": "live-truncated" },
      "\n── live output truncated; the full log is in the artifacts ──\n"));
  });
  source.addEventListener("error", () => {
    // The stream ended (the attempt did) or the connection dropped: EventSource reconnects by itself,
    // which would replay the output; once the attempt ended there is nothing more to wait for.
    if (badge.textContent && !["running", "scheduled", "retrying"].includes(badge.textContent)) {
      source.close();
      note.textContent = "This attempt has ended: its full output is in the run's Task Results, under Artifacts.";
    }
  });
})();
