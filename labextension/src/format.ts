// Small pure helpers for the panel: numbers as people read them, and a sparkline.
// A sparkline is one SVG polyline: written here because a chart library (the dashboard's
// uPlot) would add axes, legends and 50 KB for a 120 x 24 pixel line.

const SVG = 'http://www.w3.org/2000/svg';

export function fmtBytes(n: number | null | undefined): string {
  if (n === null || n === undefined) {
    return '–';
  }
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v >= 100 || i === 0 ? v.toFixed(0) : v.toFixed(1)} ${units[i]}`;
}

/** "5.6 / 23.5 GiB": used over total, the unit written once when both share it. */
export function fmtBytesOf(used: number | null, total: number | null): string {
  const a = fmtBytes(used);
  const b = fmtBytes(total);
  const [av, au] = a.split(' ');
  const [bv, bu] = b.split(' ');
  return au && au === bu ? `${av} / ${bv} ${bu}` : `${a} / ${b}`;
}

export function fmtNumber(v: number | null | undefined, digits = 3): string {
  if (v === null || v === undefined || !Number.isFinite(v)) {
    return '–';
  }
  const a = Math.abs(v);
  if (a >= 1e6) {
    return `${(v / 1e6).toFixed(1)}M`;
  }
  if (a >= 1e4) {
    return `${(v / 1e3).toFixed(1)}k`;
  }
  return Number(v.toPrecision(digits)).toString();
}

export function fmtDuration(s: number | null | undefined): string {
  if (s === null || s === undefined || !Number.isFinite(s)) {
    return '–';
  }
  const t = Math.max(0, Math.round(s));
  const h = Math.floor(t / 3600);
  const m = Math.floor((t % 3600) / 60);
  const sec = t % 60;
  if (h) {
    return `${h}h ${m}m`;
  }
  return m ? `${m}m ${sec}s` : `${sec}s`;
}

/** The throughput a run reports: tokens/s where it counts tokens, else samples/s. */
export function fmtThroughput(tokens: number | null, samples: number | null): string {
  if (tokens !== null && tokens !== undefined) {
    return `${fmtNumber(tokens)} tok/s`;
  }
  if (samples !== null && samples !== undefined) {
    return `${fmtNumber(samples)} samples/s`;
  }
  return '–';
}

/** An SVG element holding one polyline; update it with ``drawSparkline``. */
export function sparkline(className: string, width = 120, height = 24): SVGSVGElement {
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('class', `wbp-spark ${className}`);
  svg.setAttribute('width', String(width));
  svg.setAttribute('height', String(height));
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('preserveAspectRatio', 'none');
  const line = document.createElementNS(SVG, 'polyline');
  line.setAttribute('fill', 'none');
  svg.appendChild(line);
  return svg;
}

/**
 * Draw ``ys`` (with ``xs``, or evenly spaced) into ``svg``, scaled to its box. ``lo``/``hi``
 * fix the y range (a utilisation in 0..100); otherwise the data's own range is used.
 */
export function drawSparkline(
  svg: SVGSVGElement,
  ys: number[],
  xs?: number[],
  lo?: number,
  hi?: number
): void {
  const w = Number(svg.getAttribute('width'));
  const h = Number(svg.getAttribute('height'));
  const line = svg.querySelector('polyline')!;
  const keep = ys.map((y, i) => [xs ? xs[i] : i, y]).filter(([, y]) => Number.isFinite(y));
  if (keep.length < 2) {
    line.setAttribute('points', '');
    return;
  }
  const x0 = keep[0][0];
  const x1 = keep[keep.length - 1][0];
  const yl = lo ?? Math.min(...keep.map(p => p[1]));
  const yh = hi ?? Math.max(...keep.map(p => p[1]));
  const sx = x1 > x0 ? (w - 2) / (x1 - x0) : 0;
  const sy = yh > yl ? (h - 2) / (yh - yl) : 0;
  const pts = keep.map(
    ([x, y]) => `${(1 + (x - x0) * sx).toFixed(1)},${(h - 1 - (y - yl) * sy).toFixed(1)}`
  );
  line.setAttribute('points', pts.join(' '));
}

/** An element with a class and optional text. */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className = '',
  text = ''
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (className) {
    e.className = className;
  }
  if (text) {
    e.textContent = text;
  }
  return e;
}

/** A run's error as a card shows it: its first line, cut to `max` characters with "…" where
 *  anything was left out (the whole text goes in the element's title, shown on hover). */
export function firstLine(text: string, max = 120): string {
  const line = text.trim().split('\n', 1)[0].trim();
  const cut = line.length > max ? `${line.slice(0, max - 1).trimEnd()}…` : line;
  return cut !== text.trim() && !cut.endsWith('…') ? `${cut} …` : cut;
}
