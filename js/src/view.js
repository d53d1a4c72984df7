// The dashboard of one run (or of several compared): a header with the run's state, the
// controls, and the chart. The same view draws the live widget (widget.js, fed by the
// kernel) and a run's saved output (page.js, fed by the JSON stored beside it): `model`
// is anywidget's model, or a read-only stand-in with the same get/on.
import uplotCss from "uplot/dist/uPlot.min.css";
import css from "./dashboard.css";
import { Chart, fmt } from "./chart.js";
import { SamplesPanel, TEMPLATE as SAMPLES, gridFromMessage, gridsFromState } from "./samples.js";

function ensureStyle() {
  // the stylesheet once per page, for the widget and for saved outputs alike
  if (document.getElementById("wb-dashboard-style")) return;
  const style = document.createElement("style");
  style.id = "wb-dashboard-style";
  style.textContent = uplotCss + "\n" + css;
  document.head.appendChild(style);
}

export function duration(s) {
  if (!Number.isFinite(s) || s < 0) return "–";
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = Math.floor(s % 60);
  return h ? `${h}h${String(m).padStart(2, "0")}m` : m ? `${m}m${String(sec).padStart(2, "0")}s` : `${sec}s`;
}

// The ETA the header shows is the side panel's (workbench/server/tail.py, EventTail.eta_s):
// the step rate over the last PACE_POINTS logged steps, those after warm-up where there are
// two, else all of them. (The header once timed the whole run, warm-up included: 53m57s
// against the panel's 45m27s at the same moment.)
export const PACE_POINTS = 20;

export function etaSeconds(steps, times, warmupSteps, total) {
  const logged = [];
  for (let i = 0; i < steps.length; i++) {
    if (Number.isFinite(steps[i]) && Number.isFinite(times[i])) logged.push(i);
  }
  const recent = logged.slice(-PACE_POINTS);
  let points = recent.filter((i) => !(steps[i] <= warmupSteps));
  if (points.length < 2) points = recent;
  if (!total || points.length < 2) return NaN;
  const a = points[0], b = points[points.length - 1];
  if (!(steps[b] > steps[a]) || !(times[b] > times[a])) return NaN;
  const step = steps[steps.length - 1];
  return (Math.max(total - step, 0) * (times[b] - times[a])) / (steps[b] - steps[a]);
}

export function emptyRun() {
  return { train: {}, eval: {} };
}

export function append(store, fields, values, n) {
  // a delta's float32 rows into a run's columns (NaN stands for a missing value)
  const width = fields.length;
  for (let f = 0; f < width; f++) {
    const col = store[fields[f]] || (store[fields[f]] = []);
    for (let i = 0; i < n; i++) col.push(values[i * width + f]);
  }
}

export function fromHistory(history) {
  const runs = {};
  for (const [name, h] of Object.entries(history || {})) {
    runs[name] = emptyRun();
    for (const part of ["train", "eval"]) {
      for (const [k, v] of Object.entries(h[part] || {})) runs[name][part][k] = v.map((x) => (x === null ? NaN : x));
    }
  }
  return runs;
}

function summaryLine(summary) {
  // the run's final figures, for the header once it ended
  if (!summary) return "";
  const items = [];
  for (const [k, v] of Object.entries(summary.eval || {})) {
    if (typeof v === "number") items.push(`${k === "loss" ? "eval loss" : k.replaceAll("_", " ")} ${fmt(v)}`);
  }
  if (summary.tokens_per_s) items.push(`${fmt(summary.tokens_per_s)} tokens/s`);
  else if (summary.samples_per_s) items.push(`${fmt(summary.samples_per_s)} samples/s`);
  if (summary.mem_peak) items.push(`peak memory ${fmt(summary.mem_peak / 2 ** 30)} GiB`);
  if (summary.wall_time_s) items.push(`wall time ${duration(summary.wall_time_s)}`);
  if (typeof summary.train_loss === "number") items.unshift(`train loss ${fmt(summary.train_loss)}`);
  return items.join(" · ");
}

function interruptKernel(kernelId) {
  // Why REST and not a widget message: while the training cell runs, the kernel handles
  // comm messages only after the cell finishes, so a click sent through the kernel's
  // message loop would arrive too late. An interrupt (what JupyterLab's own stop button
  // does) reaches the kernel at once as SIGINT; wb.train catches it and stops gracefully.
  const cfgEl = document.getElementById("jupyter-config-data");
  const cfg = cfgEl ? JSON.parse(cfgEl.textContent) : {};
  const base = (cfg.baseUrl || "/").replace(/\/?$/, "/");
  const xsrf = (document.cookie.match(/(?:^|;\s*)_xsrf=([^;]+)/) || [])[1];
  const headers = {};
  if (xsrf) headers["X-XSRFToken"] = decodeURIComponent(xsrf);
  if (cfg.token) headers["Authorization"] = `token ${cfg.token}`;
  return fetch(`${base}api/kernels/${kernelId}/interrupt`, { method: "POST", headers, credentials: "same-origin" });
}

const TEMPLATE = `
  <div class="wb-head">
    <span class="wb-title"></span>
    <span class="wb-status"></span>
    <span class="wb-step"></span>
    <span class="wb-time"></span>
    <span class="wb-device"></span>
    <span class="wb-spacer"></span>
    <label class="wb-control">x <select class="wb-x"><option value="step">step</option><option value="time">time</option></select></label>
    <label class="wb-control" title="exponential moving average of the training curves, as TensorBoard's smoothing">smoothing
      <input class="wb-smooth" type="range" min="0" max="0.99" step="0.01"><span class="wb-smooth-value"></span></label>
    <label class="wb-control"><input class="wb-log" type="checkbox"> log loss</label>
    <button class="wb-stop" type="button">Stop</button>
  </div>
  <div class="wb-bar"><div class="wb-fill"></div></div>
  <div class="wb-error" hidden></div>
  <div class="wb-summary" hidden></div>
  <div class="wb-grid"></div>
  <div class="wb-hint">hover: values at a step · drag: zoom · double-click: zoom out</div>
  ${SAMPLES}`;

export function mountDashboard(el, model, { live }) {
  ensureStyle();
  const root = document.createElement("div");
  root.className = "wb-dash";
  root.innerHTML = TEMPLATE;
  el.appendChild(root);
  const q = (s) => root.querySelector(s);
  let runs = fromHistory(model.get("history"));
  const spec = model.get("chart");  // what to draw: workbench/views/chart.py's chart_spec
  const opts = { spec, warmupSteps: model.get("warmup_steps"),
    logScale: model.get("log_scale"), smoothing: spec.smoothing.default, xKey: "step" };
  const chart = new Chart(q(".wb-grid"), opts);
  root.wbChart = chart;  // for tests and the curious: the uPlot instances are chart.plots
  const samples = new SamplesPanel(root, gridsFromState(model.get("samples")));
  q(".wb-log").checked = opts.logScale;
  q(".wb-smooth").value = String(opts.smoothing);
  let pending = false;

  function header() {
    const name = model.get("current") || Object.keys(runs)[0];
    const run = runs[name] || emptyRun();
    const steps = run.train.step || [], times = run.train.time || [];
    const step = steps.length ? steps[steps.length - 1] : 0;
    const total = model.get("max_steps"), status = model.get("status");
    q(".wb-title").textContent = model.get("title");
    q(".wb-status").textContent = status;
    q(".wb-status").dataset.status = status;
    q(".wb-step").textContent = total ? `step ${step}/${total}` : (steps.length ? `step ${step}` : "");
    const elapsed = times.length ? times[times.length - 1] : NaN;
    const eta = etaSeconds(steps, times, opts.warmupSteps || 0, total);
    q(".wb-time").textContent = times.length ? `elapsed ${duration(elapsed)}` + (status === "running" ? ` · ETA ${duration(eta)}` : "") : "";
    q(".wb-device").textContent = model.get("device");
    q(".wb-fill").style.width = total ? `${Math.min(100, (100 * step) / total)}%` : "0%";
    q(".wb-bar").hidden = !total;
    const summary = model.get("summary") || {};
    const error = summary.error || "";
    q(".wb-error").hidden = !error;
    q(".wb-error").textContent = error;
    const line = status === "running" ? "" : summaryLine(summary);
    q(".wb-summary").hidden = !line;
    q(".wb-summary").textContent = line;
    const stop = q(".wb-stop");
    stop.style.display = live && model.get("stoppable") ? "" : "none";
    // a submitted run's job waiting for its nodes ("queued") can be stopped before it starts
    const active = status === "running" || status === "queued";
    if (!active && stop.dataset.clicked === "1") stop.textContent = "Stopped";
    stop.disabled = !active || stop.dataset.clicked === "1";
    q(".wb-smooth-value").textContent = opts.smoothing.toFixed(2);
  }

  function draw() {
    pending = false;
    header();
    const status = model.get("status");
    opts.emptyText = status === "running" ? "waiting for the first logged step…"
      : status === "queued" ? "waiting for the job's nodes…" : "no step was logged";
    chart.update(runs);
    samples.draw(model.get("current") || Object.keys(samples.grids)[0]);
    root.dataset.points = String(Object.values(runs).reduce((n, r) => n + (r.train.step || []).length, 0));
  }

  function schedule() {
    if (!pending) {
      pending = true;
      requestAnimationFrame(draw);
    }
  }

  model.on("msg:custom", (msg, buffers) => {
    if (msg.type === "samples") {
      samples.add(msg.run, gridFromMessage(msg, buffers[0]));
      schedule();
      return;
    }
    if (msg.type !== "delta") return;
    const run = runs[msg.run] || (runs[msg.run] = emptyRun());
    const view = (i) => new Float32Array(buffers[i].buffer, buffers[i].byteOffset, buffers[i].byteLength / 4);
    if (msg.n) append(run.train, msg.fields, view(0), msg.n);
    if (msg.en) append(run.eval, msg.efields, view(1), msg.en);
    schedule();
  });
  model.on("change:history", () => { runs = fromHistory(model.get("history")); schedule(); });
  model.on("change:chart", () => { opts.spec = model.get("chart"); chart.signature = ""; schedule(); });
  model.on("change:warmup_steps", () => { opts.warmupSteps = model.get("warmup_steps"); schedule(); });
  for (const trait of ["status", "max_steps", "current", "title", "device", "stoppable", "summary"]) {
    model.on(`change:${trait}`, schedule);
  }
  q(".wb-log").addEventListener("change", (e) => {
    opts.logScale = e.target.checked;
    if (live) { model.set("log_scale", opts.logScale); model.save_changes(); }
    schedule();
  });
  q(".wb-smooth").addEventListener("input", (e) => { opts.smoothing = Number(e.target.value); schedule(); });
  q(".wb-x").addEventListener("change", (e) => { opts.xKey = e.target.value; chart.setZoom(null); schedule(); });
  q(".wb-stop").addEventListener("click", async () => {
    const stop = q(".wb-stop");
    stop.dataset.clicked = "1";
    stop.textContent = "Stopping…";
    stop.disabled = true;
    if (model.get("blocking") && model.get("kernel_id")) {
      try {
        const r = await interruptKernel(model.get("kernel_id"));
        if (!r.ok) throw new Error(`interrupt answered ${r.status}`);
      } catch (err) {
        stop.textContent = "Stop failed";
        stop.title = String(err);
      }
    } else {
      model.send({ type: "stop" });  // background run: the kernel is idle and reads this at once
    }
  });
  // Follow the container's width, at every redraw and whenever it changes size.
  const observer = new ResizeObserver(() => {
    if (Math.floor(q(".wb-grid").clientWidth) !== chart.width) schedule();
  });
  observer.observe(root);
  if (live) model.send({ type: "ready" });
  draw();
  return () => { observer.disconnect(); chart.destroy(); root.remove(); };
}
