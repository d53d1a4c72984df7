// Gaudi Workbench live dashboard: an anywidget view that draws on a canvas.
// Written for this project; no third-party code, no CDN, no build step.
//
// Data arrive two ways:
//  - the `history` trait: the whole (downsampled) history, set once at the end of a run,
//    so that a saved notebook with widget state redraws when reopened;
//  - custom messages {type: "delta"} with binary float32 buffers holding only new points,
//    at most 4 a second.
// Both are thinned in the kernel (dashboard.py's one downsampler); this view draws every
// point it receives and thins nothing.
//
// What to draw comes from the kernel too: the `panels` trait is dashboard.py's PANELS, the
// list its static PNG is drawn from, so the live chart and the saved picture show the same
// panels. The helpers below mirror drawn_series, visible_panels and panel_title there.

const DASHES = { solid: [], dashed: [4, 2], dotted: [1, 2] };

function panelTitle(panel, log, warmup) {
  const notes = [panel.unit, log && "log", warmup && "warm-up shaded"].filter(Boolean);
  return panel.title + (notes.length ? ` (${notes.join(", ")})` : "");
}

function drawnSeries(panel, run) {
  // the series of `panel` this run has values for; `one_of`: the first with a non-zero value
  const out = [];
  for (const spec of panel.series) {
    const values = (spec.eval ? run.eval : run.train)[spec.field] || [];
    if (panel.one_of) {
      if (values.some((v) => Number.isFinite(v) && v !== 0)) return [spec];
    } else if (values.some((v) => Number.isFinite(v))) {
      out.push(spec);
    }
  }
  return out;
}

function visiblePanels(panels, runs) {
  return panels.filter((p) => !p.optional || Object.values(runs).some((r) => drawnSeries(p, r).length));
}

function fmt(x, span) {
  // enough digits that neighbouring tick labels differ even on a narrow range
  if (x === null || x === undefined || Number.isNaN(x)) return "-";
  const a = Math.abs(x);
  const extra = span > 0 && a > 0 ? Math.max(0, Math.ceil(Math.log10(a / span))) : 0;
  const digits = Math.min(6, 2 + extra);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return x.toExponential(Math.max(1, digits - 1));
  if (a >= 100 && extra < 2) return x.toFixed(0);
  return Number(x.toPrecision(Math.max(3, digits))).toString();
}

function duration(s) {
  if (!Number.isFinite(s) || s < 0) return "-";
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = Math.floor(s % 60);
  return h ? `${h}h${String(m).padStart(2, "0")}m` : m ? `${m}m${String(sec).padStart(2, "0")}s` : `${sec}s`;
}

function emptyRun() {
  return { train: {}, eval: {}, last: null };
}

function append(store, fields, values, n) {
  const width = fields.length;
  for (let f = 0; f < width; f++) {
    const col = store[fields[f]] || (store[fields[f]] = []);
    for (let i = 0; i < n; i++) col.push(values[i * width + f]);
  }
}

function fromHistory(history) {
  const runs = {};
  for (const [name, h] of Object.entries(history || {})) {
    runs[name] = { train: {}, eval: {}, last: null };
    for (const [k, v] of Object.entries(h.train || {})) runs[name].train[k] = v.map((x) => (x === null ? NaN : x));
    for (const [k, v] of Object.entries(h.eval || {})) runs[name].eval[k] = v.map((x) => (x === null ? NaN : x));
  }
  return runs;
}

function drawPanel(ctx, box, panel, runs, opts) {
  const { x, y, w, h } = box;
  const pad = { l: 46, r: 8, t: 16, b: 18 };
  ctx.fillStyle = "#fff";
  ctx.fillRect(x, y, w, h);
  const log = panel.scale === "log" && opts.logScale;
  ctx.fillStyle = "#333";
  ctx.font = "11px sans-serif";
  ctx.fillText(panelTitle(panel, log, panel.warmup && opts.warmupEnd > 0), x + pad.l, y + 11);
  const px = x + pad.l, py = y + pad.t, pw = w - pad.l - pad.r, ph = h - pad.t - pad.b;
  const scale = 1 / (panel.divisor || 1);
  let xmin = Infinity, xmax = -Infinity, ymin = Infinity, ymax = -Infinity;
  const lines = [];
  const names = Object.keys(runs);
  names.forEach((name, ri) => {
    const run = runs[name];
    for (const spec of drawnSeries(panel, run)) {
      const src = spec.eval ? run.eval : run.train;
      const xs = src.step || [], ys = src[spec.field] || [];
      const pts = [];
      for (let i = 0; i < ys.length; i++) {
        let v = ys[i] * scale;
        if (!Number.isFinite(v) || (log && v <= 0)) continue;
        if (log) v = Math.log10(v);
        pts.push([xs[i], v]);
        xmin = Math.min(xmin, xs[i]); xmax = Math.max(xmax, xs[i]);
        ymin = Math.min(ymin, v); ymax = Math.max(ymax, v);
      }
      if (!pts.length) continue;
      const many = names.length > 1, colours = opts.runColours;
      lines.push({ pts, colour: many ? colours[ri % colours.length] : spec.colour,
        label: many ? `${name.slice(-24)} ${spec.label}` : spec.label,
        dash: DASHES[spec.style || "solid"], marker: Boolean(spec.marker) });
    }
  });
  if (panel.total && opts.memTotal > 0) ymax = Math.max(ymax, opts.memTotal * scale);
  if (!lines.length) {
    ctx.fillStyle = "#999";
    ctx.fillText("waiting for data", px + 4, py + ph / 2);
    return;
  }
  if (xmin === xmax) { xmin -= 1; xmax += 1; }
  if (ymin === ymax) { ymin -= Math.abs(ymin) * 0.1 + 1e-9; ymax += Math.abs(ymax) * 0.1 + 1e-9; }
  if (!log && ymin > 0 && ymin < 0.3 * ymax) ymin = 0;
  const sx = (v) => px + ((v - xmin) / (xmax - xmin)) * pw;
  const sy = (v) => py + ph - ((v - ymin) / (ymax - ymin)) * ph;
  if (panel.warmup && opts.warmupEnd > xmin) {  // the warm-up steps, excluded from throughput
    ctx.fillStyle = "rgba(255,200,0,0.15)";
    ctx.fillRect(px, py, Math.min(sx(opts.warmupEnd), px + pw) - px, ph);
  }
  ctx.strokeStyle = "#ddd";
  ctx.lineWidth = 1;
  ctx.strokeRect(px, py, pw, ph);
  ctx.fillStyle = "#666";
  ctx.font = "10px sans-serif";
  for (let i = 0; i <= 3; i++) {
    const v = ymin + ((ymax - ymin) * i) / 3;
    const yy = sy(v);
    const span = log ? 10 ** ymax - 10 ** ymin : ymax - ymin;
    ctx.fillText(fmt(log ? 10 ** v : v, span / 3), x + 2, yy + 3);
    ctx.beginPath(); ctx.moveTo(px, yy); ctx.lineTo(px + pw, yy); ctx.stroke();
  }
  ctx.fillText(String(Math.round(xmin)), px, py + ph + 12);
  const right = String(Math.round(xmax));
  ctx.fillText(right, px + pw - ctx.measureText(right).width, py + ph + 12);
  if (panel.total && opts.memTotal > 0) {
    ctx.strokeStyle = "#999";
    ctx.setLineDash([2, 3]);
    ctx.beginPath(); ctx.moveTo(px, sy(opts.memTotal * scale)); ctx.lineTo(px + pw, sy(opts.memTotal * scale)); ctx.stroke();
    ctx.setLineDash([]);
  }
  let lx = px + pw - 4;
  for (const line of lines) {
    ctx.strokeStyle = line.colour;
    ctx.lineWidth = 1.5;
    ctx.setLineDash(line.dash);
    ctx.beginPath();
    line.pts.forEach(([a, b], i) => (i ? ctx.lineTo(sx(a), sy(b)) : ctx.moveTo(sx(a), sy(b))));
    if (line.pts.length === 1) ctx.arc(sx(line.pts[0][0]), sy(line.pts[0][1]), 2, 0, 2 * Math.PI);
    ctx.stroke();
    ctx.setLineDash([]);
    if (line.marker) {
      ctx.fillStyle = line.colour;
      for (const [a, b] of line.pts) { ctx.beginPath(); ctx.arc(sx(a), sy(b), 2, 0, 2 * Math.PI); ctx.fill(); }
    }
    const tw = ctx.measureText(line.label).width;
    lx -= tw;
    ctx.fillStyle = line.colour;
    ctx.fillText(line.label, lx, py + 10);
    lx -= 10;
  }
  if (panel.total && opts.memTotal > 0) {
    lx -= ctx.measureText("total").width;
    ctx.fillStyle = "#999";
    ctx.fillText("total", lx, py + 10);
  }
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

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "wb-dash";
  root.innerHTML = `
    <div class="wb-head">
      <span class="wb-title"></span>
      <span class="wb-status"></span>
      <span class="wb-step"></span>
      <span class="wb-time"></span>
      <span class="wb-device"></span>
      <span class="wb-spacer"></span>
      <label class="wb-log"><input type="checkbox" checked> log loss</label>
      <button class="wb-stop" type="button">Stop</button>
    </div>
    <div class="wb-bar"><div class="wb-fill"></div></div>
    <canvas class="wb-canvas"></canvas>`;
  el.appendChild(root);
  const canvas = root.querySelector("canvas");
  const q = (s) => root.querySelector(s);
  let runs = fromHistory(model.get("history"));
  let logScale = model.get("log_scale");
  q(".wb-log input").checked = logScale;
  let pending = false;

  function header() {
    const name = model.get("current");
    const run = runs[name] || emptyRun();
    const steps = run.train.step || [];
    const times = run.train.time || [];
    const step = steps.length ? steps[steps.length - 1] : 0;
    const total = model.get("max_steps");
    const status = model.get("status");
    q(".wb-title").textContent = model.get("title");
    q(".wb-status").textContent = status;
    q(".wb-status").dataset.status = status;
    q(".wb-step").textContent = total ? `step ${step}/${total}` : `step ${step}`;
    const elapsed = times.length ? times[times.length - 1] : NaN;
    let eta = NaN;
    if (steps.length > 1 && total) eta = ((elapsed - times[0]) / (step - steps[0])) * (total - step);
    q(".wb-time").textContent = `elapsed ${duration(elapsed)}` + (status === "running" ? ` · ETA ${duration(eta)}` : "");
    q(".wb-device").textContent = model.get("device");
    q(".wb-fill").style.width = total ? `${Math.min(100, (100 * step) / total)}%` : "0%";
    const stop = q(".wb-stop");
    stop.disabled = status !== "running" || stop.dataset.clicked === "1";
    if (status !== "running" && stop.dataset.clicked === "1") stop.textContent = "Stopped";
    stop.style.display = model.get("stoppable") ? "" : "none";
  }

  function draw() {
    pending = false;
    header();
    const width = Math.max(420, root.clientWidth || el.clientWidth || 720);
    const panels = visiblePanels(model.get("panels"), runs);
    const cols = 2, rows = Math.ceil(panels.length / cols), ph = 150;
    const dpr = window.devicePixelRatio || 1;
    canvas.width = width * dpr;
    canvas.height = rows * ph * dpr;
    canvas.style.width = `${width}px`;
    canvas.style.height = `${rows * ph}px`;
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, width, rows * ph);
    const opts = { logScale, memTotal: model.get("mem_total"), warmupEnd: model.get("warmup_steps"),
      runColours: model.get("run_colours") };
    panels.forEach((panel, i) => {
      const box = { x: (i % cols) * (width / cols), y: Math.floor(i / cols) * ph, w: width / cols, h: ph };
      drawPanel(ctx, box, panel, runs, opts);
    });
    canvas.dataset.points = String(Object.values(runs).reduce((n, r) => n + (r.train.step || []).length, 0));
  }

  function schedule() {
    if (!pending) {
      pending = true;
      requestAnimationFrame(draw);
    }
  }

  model.on("msg:custom", (msg, buffers) => {
    if (msg.type !== "delta") return;
    const run = runs[msg.run] || (runs[msg.run] = emptyRun());
    const view = (i) => new Float32Array(buffers[i].buffer, buffers[i].byteOffset, buffers[i].byteLength / 4);
    if (msg.n) append(run.train, msg.fields, view(0), msg.n);
    if (msg.en) append(run.eval, msg.efields, view(1), msg.en);
    schedule();
  });
  model.on("change:history", () => { runs = fromHistory(model.get("history")); schedule(); });
  for (const trait of ["status", "max_steps", "current", "title", "device", "mem_total", "stoppable", "panels"]) {
    model.on(`change:${trait}`, schedule);
  }
  q(".wb-log input").addEventListener("change", (e) => {
    logScale = e.target.checked;
    model.set("log_scale", logScale);
    model.save_changes();
    schedule();
  });
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
  model.send({ type: "ready" });
  draw();
  return () => root.remove();
}

export default { render };
