// The picture panel of a text-to-image run: the latest grid of samples for the run's fixed
// prompts, its step, and ‹ › to step back through the earlier grids. Grids come from the
// saved state (base64 PNGs, `samples` by run) or, live, one message per grid carrying the
// PNG bytes (shown through a blob URL: no base64 round trip).

export const TEMPLATE = `
  <div class="wb-samples" hidden>
    <div class="wb-samples-head">
      <span class="wb-samples-title"></span>
      <button class="wb-samples-prev" type="button" title="the grid before">‹</button>
      <button class="wb-samples-next" type="button" title="the grid after">›</button>
    </div>
    <div class="wb-samples-box">
      <img class="wb-samples-img" alt="samples">
      <div class="wb-samples-prompts"></div>
    </div>
  </div>`;

export function gridsFromState(samples) {
  // {run: [{step, prompts, columns, image (base64)}]} -> {run: [{step, prompts, columns, src}]}
  const out = {};
  for (const [name, grids] of Object.entries(samples || {})) {
    out[name] = grids.map((g) => ({ step: g.step, prompts: g.prompts || [], columns: g.columns || 1,
      src: `data:image/png;base64,${g.image}` }));
  }
  return out;
}

export function gridFromMessage(msg, buffer) {
  const bytes = new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
  const src = URL.createObjectURL(new Blob([bytes], { type: "image/png" }));
  return { step: msg.step, prompts: msg.prompts || [], columns: msg.columns || 1, src };
}

export class SamplesPanel {
  constructor(root, grids) {
    this.root = root;
    this.grids = grids;  // {run: [grid, ...]}, oldest first
    this.at = null;  // the index shown; null: follow the latest
    this.q = (s) => root.querySelector(s);
    this.q(".wb-samples-prev").addEventListener("click", () => this.step(-1));
    this.q(".wb-samples-next").addEventListener("click", () => this.step(1));
    this.q(".wb-samples-img").addEventListener("load", (e) => {
      // thumbnails drawn twice their size (pixels kept sharp), never wider than the view
      e.target.style.width = `${2 * e.target.naturalWidth}px`;
    });
  }

  add(run, grid) {
    (this.grids[run] || (this.grids[run] = [])).push(grid);
  }

  step(by) {
    const list = this.list;
    const i = (this.at === null ? list.length - 1 : this.at) + by;
    this.at = i >= list.length - 1 ? null : Math.max(0, i);
    this.draw(this.run);
  }

  draw(run) {
    this.run = run;
    const list = this.list;
    this.q(".wb-samples").hidden = !list.length;
    if (!list.length) return;
    const i = this.at === null ? list.length - 1 : Math.min(this.at, list.length - 1);
    const grid = list[i];
    this.q(".wb-samples-title").textContent =
      `samples at step ${grid.step}` + (list.length > 1 ? ` (${i + 1} of ${list.length})` : "");
    this.q(".wb-samples-prev").disabled = i === 0;
    this.q(".wb-samples-next").disabled = i === list.length - 1;
    const img = this.q(".wb-samples-img");
    if (img.getAttribute("src") !== grid.src) img.src = grid.src;
    img.dataset.step = String(grid.step);
    const prompts = this.q(".wb-samples-prompts");
    const oneRow = grid.prompts.length <= grid.columns;
    prompts.hidden = !oneRow;  // captions under their column when the grid is one row
    prompts.style.gridTemplateColumns = `repeat(${grid.columns}, minmax(0, 1fr))`;
    prompts.replaceChildren(...(oneRow ? grid.prompts : []).map((p) => {
      const cell = document.createElement("span");
      cell.textContent = p;
      return cell;
    }));
    img.title = grid.prompts.join(" · ");
  }

  get list() {
    return (this.grids[this.run] || []);
  }
}
