// A run's saved output: the finished chart, drawn from the JSON stored beside this script.
// The output also holds a static picture; where scripts run (a trusted notebook in
// JupyterLab, nbconvert's HTML) the interactive chart replaces it, elsewhere
// (GitHub, nbviewer, an untrusted notebook) the picture is what shows.
import { mountDashboard } from "./view.js";

function readOnlyModel(state) {
  return { get: (k) => state[k], on() {}, set() {}, save_changes() {}, send() {} };
}

function mount(box) {
  const data = box && !box.dataset.mounted && box.querySelector("script.wb-state");
  if (!data) return;
  box.dataset.mounted = "1";
  const view = document.createElement("div");
  box.prepend(view);
  mountDashboard(view, readOnlyModel(JSON.parse(data.textContent)), { live: false });
  const fallback = box.querySelector(".wb-fallback");
  if (fallback) fallback.hidden = true;
}

// JupyterLab runs an output's scripts before the output is in the page: find the output
// from this script's own element, then any others not drawn yet.
mount(document.currentScript?.closest(".wb-saved"));
document.querySelectorAll(".wb-saved").forEach(mount);
