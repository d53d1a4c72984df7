// The panels of a run's chart, drawn with uPlot: one small uPlot per panel, their cursors
// synced (a crosshair at one step on every panel, each legend showing its series' values
// there), drag to zoom every panel at once, double-click to zoom back out.
//
// What to draw and how comes from the kernel: `spec` is workbench/views/chart.py's
// chart_spec, the one the static picture is drawn from too: the chart spec
// (workbench/assets/chart.json) with each panel read for these runs there, once: which
// panels show (`shown`), which fields each run draws (`drawn`), the title with its notes
// (`heading`, `heading_log`), the y label (`axis`), the device's total (`device_total`).
// Nothing here decides what a panel means; no drawing rule is written here as a value.
import uPlot from "uplot";

const MIN_PANEL = 320; // px: the spec's columns a row where each gets this width, else fewer
const HEIGHT = 190;

function niceIncrs(steps) {
  // ticks at the spec's steps (1, 2 and 5) times a power of ten, on every linear axis
  const incrs = [];
  for (let e = -12; e <= 12; e++) for (const m of steps) incrs.push(+(m * 10 ** e).toPrecision(1));
  return incrs;
}

export function xIncrs(spec, xKey) {
  // the x axis's tick increments: whole ones on an axis of whole numbers (steps: no tick at
  // step 0.5 early in a run), else those of every linear axis
  const incrs = niceIncrs(spec.tick_steps);
  return spec.x.whole.includes(xKey) ? incrs.filter((v) => v >= 1) : incrs;
}

export function fmt(x) {
  // a tick or legend value: short, and exact enough to tell neighbouring ticks apart
  if (x === null || x === undefined || !Number.isFinite(x)) return "–";
  const a = Math.abs(x);
  if (a === 0) return "0";
  if (a >= 1e6 || a < 1e-3) return x.toExponential(1).replace("e+", "e");
  if (a >= 1000) return Math.round(x).toLocaleString("en-US");
  return String(+x.toPrecision(4));
}

export function fmtValue(x) {
  // a legend value at the cursor: more digits than a tick
  if (x === null || x === undefined || !Number.isFinite(x)) return "–";
  const a = Math.abs(x);
  if (a !== 0 && (a >= 1e6 || a < 1e-3)) return x.toExponential(3).replace("e+", "e");
  if (a >= 1000) return Math.round(x).toLocaleString("en-US");
  return String(+x.toPrecision(5));
}

function logFilter(steps) {
  // on a log axis, ticks and grid lines at the spec's steps times a power of ten only
  return (u, splits) => splits.map((v) => {
    const m = +(v / 10 ** Math.floor(Math.log10(v) + 1e-9)).toPrecision(3);
    return steps.includes(m) ? v : null;
  });
}

function rgba(hex, alpha) {
  // a "#rrggbb" colour and an alpha as the canvas's "rgba(r, g, b, alpha)"
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
}

export function logRange(min, max) {
  // a log axis's range: whole decades around the positive data, at least one decade wide.
  // uPlot's log-axis ticks step from decade to decade between the range's ends: an end at 0
  // or below (log10 = -Infinity), or not a number, sends that loop on until the array limit
  // (a frozen page, then "RangeError: Invalid array length"), so no data, or none above 0,
  // gets 1 to 10.
  if (!(min > 0) || !(max > 0) || !Number.isFinite(min) || !Number.isFinite(max)) return [1, 10];
  const lo = 10 ** Math.floor(Math.log10(min));
  let hi = 10 ** Math.ceil(Math.log10(max));
  if (!(hi > lo)) hi = lo * 10;  // one value, or all values on one power of ten
  return [lo, hi];
}

export function smooth(values, weight) {
  // TensorBoard's smoothing: an exponential moving average, debiased so the first points
  // are not pulled towards zero; missing values are skipped, not averaged in
  if (!(weight > 0)) return values;
  const out = new Array(values.length);
  let last = 0, n = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === null || !Number.isFinite(v)) { out[i] = null; continue; }
    last = last * weight + (1 - weight) * v;
    n += 1;
    out[i] = last / (1 - weight ** n);
  }
  return out;
}

function clean(values) {
  return (values || []).map((v) => (Number.isFinite(v) ? v : null));
}

// What one panel draws for these runs: uPlot series options and (x, y) tables to join.
function panelData(panel, runs, o) {
  const names = Object.keys(runs), many = names.length > 1;
  const series = [], tables = [];
  const scale = 1 / (panel.divisor || 1);
  const log = panel.scale === "log" && o.logScale;
  const line = o.spec.line, colours = o.spec.run_colours, raw = o.spec.smoothing;
  names.forEach((name, ri) => {
    const run = runs[name];
    const fields = panel.drawn[name] || [];
    for (const spec of panel.series.filter((s) => fields.includes(s.field))) {
      const src = spec.eval ? run.eval : run.train;
      const xs = clean(o.xKey === "time" ? src.time : src.step);
      let ys = clean(src[spec.field]).map((v) => (v === null ? null : v * scale));
      if (log) ys = ys.map((v) => (v > 0 ? v : null));
      const keep = xs.map((x, i) => x !== null && (i === 0 || x > xs[i - 1]));  // join wants rising x
      const x = xs.filter((_, i) => keep[i]), y = ys.filter((_, i) => keep[i]);
      if (!x.length) continue;
      const colour = many ? colours[ri % colours.length] : spec.colour;
      const label = many ? `${name.slice(-o.spec.run_name_chars)} ${spec.label}` : spec.label;
      const dash = line.styles[spec.style || "solid"];
      const points = { show: Boolean(spec.marker) || x.length === 1, size: line.marker_px, fill: colour };
      const value = (u, v) => fmtValue(v);
      const smoothing = spec.smooth && o.smoothing > 0;
      if (smoothing) {  // the raw line stays, faint, behind the smoothed one
        series.push({ label: `${label} (raw)`, stroke: rgba(colour, raw.raw_alpha), width: raw.raw_width_px, dash, value,
          points: { show: false } });
        tables.push([x, y]);
      }
      series.push({ label, stroke: colour, width: line.width_px, dash, value, points, spanGaps: Boolean(spec.eval) });
      tables.push([x, smoothing ? smooth(y, o.smoothing) : y]);
    }
  });
  return { series, tables, log };
}

export class Chart {
  // The grid of panels for `runs` ({name: {train: {field: [...]}, eval: {...}}}).
  constructor(el, opts) {
    this.el = el;
    this.opts = opts;  // {spec, warmupSteps, logScale, smoothing, xKey}
    this.plots = [];
    this.signature = "";
    this.zoom = null;  // {min, max} of the x scale while zoomed, else null
    this.sync = uPlot.sync(`wb-${Math.random().toString(36).slice(2)}`);
    this.width = 0;
  }

  layout() {
    // panel widths from the container's width: called on every redraw and by the ResizeObserver
    const width = Math.max(240, Math.floor(this.el.clientWidth || 0));
    const cols = Math.max(1, Math.min(this.opts.spec.columns, Math.floor(width / MIN_PANEL)));
    const gap = 8;
    return { width, cols, panelWidth: Math.floor((width - gap * (cols - 1)) / cols) };
  }

  update(runs) {
    this.runs = runs;
    const o = this.opts;
    const panels = o.spec.panels.filter((p) => p.shown);
    const drawn = panels.map((p) => ({ panel: p, ...panelData(p, runs, o) }));
    const signature = JSON.stringify([drawn.map((d) => [d.panel.key, d.log, d.series.map((s) => s.label)]),
      o.xKey, this.layout().cols, o.emptyText]);
    if (signature !== this.signature) this.rebuild(drawn, signature);
    drawn.forEach((d, i) => {
      const plot = this.plots[i];
      plot.setData(this.join(d), false);
      this.applyX(plot);
    });
    this.resize();
  }

  join(d) {
    if (!d.tables.length) return [[]];
    return d.tables.length === 1 ? d.tables[0] : uPlot.join(d.tables);
  }

  xRange() {
    // from 0 (step 0, or the run's start) to a little past the last point, so that a lone
    // eval point at the right edge is drawn whole; the zoom, while zoomed
    if (this.zoom) return this.zoom;
    let max = 0;
    for (const run of Object.values(this.runs || {})) {
      for (const src of [run.train, run.eval]) {
        const xs = (this.opts.xKey === "time" ? src.time : src.step) || [];
        for (const x of xs) if (Number.isFinite(x) && x > max) max = x;
      }
    }
    return { min: 0, max: max > 0 ? max * (1 + this.opts.spec.x.pad) : 1 };
  }

  applyX(plot) {
    const { min, max } = this.xRange();
    plot.setScale("x", { min, max });
  }

  setZoom(zoom) {
    this.zoom = zoom;
    for (const plot of this.plots) this.applyX(plot);
  }

  rebuild(drawn, signature) {
    for (const plot of this.plots) plot.destroy();
    this.el.textContent = "";
    this.plots = [];
    this.signature = signature;
    const { panelWidth } = this.layout();
    if (!drawn.length) {
      const empty = document.createElement("div");
      empty.className = "wb-empty";
      empty.textContent = this.opts.emptyText || "waiting for the first logged step…";
      this.el.appendChild(empty);
      return;
    }
    for (const d of drawn) {
      const box = document.createElement("div");
      box.className = "wb-panel";
      box.dataset.panel = d.panel.key;
      this.el.appendChild(box);
      const plot = new uPlot(this.plotOptions(d, panelWidth), this.join(d), box);
      plot.wbPanel = d.panel.key;
      this.plots.push(plot);
    }
  }

  plotOptions(d, width) {
    const o = this.opts, spec = o.spec, panel = d.panel, chart = this;
    const total = panel.device_total;
    const incrs = niceIncrs(spec.tick_steps), logTicks = logFilter(spec.tick_steps);
    const xLabel = spec.x.labels[o.xKey];
    const linearRange = (min, max) => {
      if (!Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
      let lo = panel.zero || (min > 0 && min < 0.3 * max) ? Math.min(0, min) : min;
      let hi = max;
      if (total && max > spec.total_line.from * total) hi = total;  // the device's size, once it matters
      if (hi === lo) { lo -= Math.abs(lo) * 0.1 || 1; hi += Math.abs(hi) * 0.1 || 1; }
      const pad = (hi - lo) * spec.y.pad;
      return [lo === 0 ? 0 : lo - pad, hi + pad];
    };
    const yRange = (u, min, max) => (d.log ? logRange(min, max) : linearRange(min, max));
    return {
      width, height: HEIGHT,
      title: d.log ? panel.heading_log : panel.heading,
      scales: {
        x: { time: false, range: (u, min, max) => [min, max] },
        y: d.log ? { distr: 3, log: 10, range: yRange } : { range: yRange },
      },
      axes: [
        { label: xLabel, incrs: xIncrs(spec, o.xKey), size: 36, labelSize: 16, values: (u, splits) => splits.map(fmt) },
        { label: panel.axis, incrs, size: 56, labelSize: 16,
          values: (u, splits) => splits.map((v) => (v === null ? "" : fmt(v))),
          ...(d.log ? { filter: logTicks, grid: { filter: logTicks }, ticks: { filter: logTicks } } : {}) },
      ],
      series: [{ label: xLabel, value: (u, v) => fmtValue(v) }, ...d.series],
      legend: { live: true },
      cursor: {
        sync: { key: this.sync.key, setSeries: false },
        drag: { x: true, y: false, setScale: false },
        bind: { dblclick: () => () => { chart.setZoom(null); return null; } },
      },
      hooks: {
        setSelect: [(u) => {
          // a drag selected a range: zoom every panel to it
          if (u.select.width < 3) return;
          const min = u.posToVal(u.select.left, "x"), max = u.posToVal(u.select.left + u.select.width, "x");
          u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
          chart.setZoom({ min, max });
        }],
        drawClear: [(u) => panel.warmup && chart.shadeWarmup(u)],
        draw: [(u) => total && chart.totalLine(u, total), (u) => !d.tables.length && chart.emptyText(u)],
      },
    };
  }

  shadeWarmup(u) {
    // the warm-up steps, which throughput figures leave out
    const end = this.warmupEnd();
    if (!(end > 0)) return;
    const ctx = u.ctx, { left, top, width, height } = u.bbox;
    const x1 = Math.min(u.valToPos(end, "x", true), left + width);
    if (x1 <= left) return;
    ctx.save();
    const shade = this.opts.spec.warmup_shade;
    ctx.fillStyle = rgba(shade.colour, shade.alpha);
    ctx.fillRect(left, top, x1 - left, height);
    ctx.restore();
  }

  warmupEnd() {
    const steps = this.opts.warmupSteps;
    if (!(steps > 0) || this.opts.xKey !== "time") return steps;
    const run = Object.values(this.runs || {})[0];  // in time: when the warm-up step was logged
    const i = (run?.train.step || []).findIndex((s) => s >= steps);
    return i >= 0 ? run.train.time[i] : NaN;
  }

  totalLine(u, total) {
    const y = u.valToPos(total, "y", true), { left, top, width, height } = u.bbox;
    if (y < top || y > top + height) return;
    const ctx = u.ctx, rule = this.opts.spec.total_line;
    ctx.save();
    ctx.strokeStyle = rule.colour;
    ctx.setLineDash(rule.dash);
    ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(left + width, y); ctx.stroke();
    ctx.restore();
  }

  emptyText(u) {
    // a panel with nothing to draw says so, as the picture does
    const { left, top, width, height } = u.bbox, empty = this.opts.spec.empty, ctx = u.ctx;
    ctx.save();
    ctx.fillStyle = empty.colour;
    ctx.font = `${Math.round(12 * devicePixelRatio)}px sans-serif`;
    ctx.textAlign = "center";
    ctx.fillText(empty.text, left + width / 2, top + height / 2);
    ctx.restore();
  }

  resize() {
    const { width, panelWidth } = this.layout();
    this.width = width;
    for (const plot of this.plots) {
      if (plot.width !== panelWidth) plot.setSize({ width: panelWidth, height: HEIGHT });
    }
  }

  destroy() {
    for (const plot of this.plots) plot.destroy();
    this.plots = [];
  }
}
