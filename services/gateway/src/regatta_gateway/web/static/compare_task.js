/* The side-by-side task view: each side's trajectory, embedded by the server as JSON, drawn by the
 * pages' one renderer (Regatta.renderTrajectory in app.js). */
"use strict";

(() => {
  for (const holder of document.querySelectorAll("[data-trajectory]")) {
    const source = document.getElementById(holder.dataset.trajectory);
    let trajectory;
    try {
      trajectory = JSON.parse(source.textContent);
    } catch (error) {
      holder.textContent = "The trajectory could not be read.";
      continue;
    }
    holder.replaceChildren(Regatta.renderTrajectory(trajectory));
  }
})();
