// The live dashboard as an anywidget view: the kernel's traits and float32 deltas drive it.
import { mountDashboard } from "./view.js";

function render({ model, el }) {
  return mountDashboard(el, model, { live: true });
}

export default { render };
