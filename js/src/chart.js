// The panels of a run's chart, drawn with uPlot: one small uPlot per panel, their cursors
// synced (a crosshair at one step on every panel, each legend showing its series' values
// there), drag to zoom every panel at once, double-click to zoom back out.
//
// What to draw comes from the kernel: `panels` is chart.py's description (PANELS, with the
// run's eval metrics expanded), the list the static picture is drawn from too. The helpers
// drawnSeries and visiblePanels mirror chart.py's functions of the same names.
import uPlot from "uplot";

const DASHES = { solid: [], dashed: [6, 3], dotted: [2, 3] };
const MIN_PANEL = 320; // px: two panels a row from 2 x this width up
const HEIGHT = 190;

export function drawnSeries(panel, run) {
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

export function visiblePanels(panels, runs) {
  return panels.filter((p) => !p.optional || Object.values(runs).some((r) => drawnSeries(p, r).length));
}

// Nice ticks: 1, 2 and 5 times a power of ten, on every linear axis.
const INCRS = [];
for (let e = -12; e <= 12; e++) for (const m of [1, 2, 5]) INCRS.push(+(m * 10 ** e).toPrecision(1));

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

function logFilter(u, splits) {
  // on a log axis, ticks and grid lines at 1, 2 and 5 times a power of ten only
  return splits.map((v) => {
    const m = +(v / 10 ** Math.floor(Math.log10(v) + 1e-9)).toPrecision(3);
    return m === 1 || m === 2 || m === 5 ? v : null;
  });
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

function yLabel(panel, specs) {
  if (panel.ylabel) return panel.ylabel;
  if (panel.unit) return panel.unit;
  return specs.length === 1 ? specs[0].unit || specs[0].label : panel.title;
}

// What one panel draws for these runs: uPlot series options and (x, y) tables to join.
function panelData(panel, runs, o) {
  const names = Object.keys(runs), many = names.length > 1;
  const series = [], tables = [], specs = [];
  const scale = 1 / (panel.divisor || 1);
  const log = panel.scale === "log" && o.logScale;
  names.forEach((name, ri) => {
    const run = runs[name];
    for (const spec of drawnSeries(panel, run)) {
      if (!specs.includes(spec)) specs.push(spec);
      const src = spec.eval ? run.eval : run.train;
      const xs = clean(o.xKey === "time" ? src.time : src.step);
      let ys = clean(src[spec.field]).map((v) => (v === null ? null : v * scale));
      if (log) ys = ys.map((v) => (v > 0 ? v : null));
      const keep = xs.map((x, i) => x !== null && (i === 0 || x > xs[i - 1]));  // join wants rising x
      const x = xs.filter((_, i) => keep[i]), y = ys.filter((_, i) => keep[i]);
      if (!x.length) continue;
      const colour = many ? o.runColours[ri % o.runColours.length] : spec.colour;
      const label = many ? `${name.slice(-28)} ${spec.label}` : spec.label;
      const dash = DASHES[spec.style || "solid"];
      const points = { show: Boolean(spec.marker) || x.length === 1, size: 6, fill: colour };
      const value = (u, v) => fmtValue(v);
      const smoothing = spec.smooth && o.smoothing > 0;
      if (smoothing) {  // the raw line stays, faint, behind the smoothed one
        series.push({ label: `${label} (raw)`, stroke: colour + "40", width: 1, dash, value, points: { show: false } });
        tables.push([x, y]);
      }
      series.push({ label, stroke: colour, width: 1.6, dash, value, points, spanGaps: Boolean(spec.eval) });
      tables.push([x, smoothing ? smooth(y, o.smoothing) : y]);
    }
  });
  return { series, tables, log, specs };
}

export class Chart {
  // The grid of panels for `runs` ({name: {train: {field: [...]}, eval: {...}}}).
  constructor(el, opts) {
    this.el = el;
    this.opts = opts;  // {panels, runColours, memTotal, warmupSteps, logScale, smoothing, xKey}
    this.plots = [];
    this.signature = "";
    this.zoom = null;  // {min, max} of the x scale while zoomed, else null
    this.sync = uPlot.sync(`wb-${Math.random().toString(36).slice(2)}`);
    this.width = 0;
  }

  layout() {
    // panel widths from the container's width: called on every redraw and by the ResizeObserver
    const width = Math.max(240, Math.floor(this.el.clientWidth || 0));
    const cols = width >= 2 * MIN_PANEL ? 2 : 1;
    const gap = 8;
    return { width, cols, panelWidth: Math.floor((width - gap * (cols - 1)) / cols) };
  }

  update(runs) {
    this.runs = runs;
    const o = this.opts;
    const panels = visiblePanels(o.panels, runs);
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
    return { min: 0, max: max > 0 ? max * 1.03 : 1 };
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
    const o = this.opts, panel = d.panel, chart = this;
    const specs = d.specs.length ? d.specs : panel.series;
    const total = panel.total && o.memTotal > 0 ? o.memTotal / (panel.divisor || 1) : 0;
    const warm = panel.warmup && o.warmupSteps > 0;
    const titleNotes = [d.log && "log scale", warm && "warm-up shaded", total && `of ${fmt(total)} ${panel.unit || ""} total`.replace("  ", " ")]
      .filter(Boolean);
    const linearRange = (min, max) => {
      if (!Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
      let lo = panel.zero || (min > 0 && min < 0.3 * max) ? Math.min(0, min) : min;
      let hi = max;
      if (total && max > 0.5 * total) hi = total;  // the device's size, once it matters
      if (hi === lo) { lo -= Math.abs(lo) * 0.1 || 1; hi += Math.abs(hi) * 0.1 || 1; }
      const pad = (hi - lo) * 0.06;
      return [lo === 0 ? 0 : lo - pad, hi + pad];
    };
    const yRange = (u, min, max) => (d.log ? logRange(min, max) : linearRange(min, max));
    return {
      width, height: HEIGHT,
      title: panel.title + (titleNotes.length ? ` (${titleNotes.join(", ")})` : ""),
      scales: {
        x: { time: false, range: (u, min, max) => [min, max] },
        y: d.log ? { distr: 3, log: 10, range: yRange } : { range: yRange },
      },
      axes: [
        { label: o.xKey === "time" ? "time (s)" : "step", incrs: INCRS, size: 36, labelSize: 16,
          values: (u, splits) => splits.map(fmt) },
        { label: yLabel(panel, specs), incrs: INCRS, size: 56, labelSize: 16,
          values: (u, splits) => splits.map((v) => (v === null ? "" : fmt(v))),
          ...(d.log ? { filter: logFilter, grid: { filter: logFilter }, ticks: { filter: logFilter } } : {}) },
      ],
      series: [{ label: o.xKey === "time" ? "time (s)" : "step", value: (u, v) => fmtValue(v) }, ...d.series],
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
        draw: [(u) => total && chart.totalLine(u, total)],
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
    ctx.fillStyle = "rgba(255, 190, 0, 0.13)";
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
    const ctx = u.ctx;
    ctx.save();
    ctx.strokeStyle = "#888";
    ctx.setLineDash([3, 3]);
    ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(left + width, y); ctx.stroke();
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
