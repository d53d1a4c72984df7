// A run's summary in the main area: status, the summary's figures, checkpoints, the last
// events. Read from the server once when opened and again on Refresh.
import { MainAreaWidget } from '@jupyterlab/apputils';
import { refreshIcon, ToolbarButton } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { api, IRunDetail } from './api';
import { el, fmtBytes, fmtDuration, fmtNumber } from './format';
import { describe } from './model';

class SummaryView extends Widget {
  constructor(readonly path: string) {
    super();
    this.addClass('wbp-summary-view');
    void this.load();
  }

  async load(): Promise<void> {
    try {
      this._show(await api.run(this.path));
    } catch (error) {
      this.node.replaceChildren(el('div', 'wbp-error', describe(error)));
    }
  }

  private _show(d: IRunDetail): void {
    const table = el('table', 'wbp-kv');
    const rows: [string, unknown][] = [['run', d.name], ['path', d.path], ['status', d.status]];
    for (const [k, v] of Object.entries(d.summary)) {
      if (k !== 'status' && v !== null && v !== undefined && k !== 'traceback') {
        rows.push([k, v]);
      }
    }
    for (const [k, v] of rows) {
      const tr = table.appendChild(el('tr'));
      tr.appendChild(el('th', '', k));
      tr.appendChild(el('td', '', fmtValue(k, v)));
    }
    const ckpt = el('p', '', `Checkpoints: ${d.checkpoints.length ? d.checkpoints.join(', ') : 'none'}`);
    const grid: HTMLElement[] = [];
    if (d.samples) {
      const img = el('img', 'wbp-grid');
      img.src = `data:image/png;base64,${d.samples.image}`;
      img.alt = d.samples.prompts.join(' | ');
      grid.push(el('h3', '', `Samples at step ${d.samples.step}`), img, el('p', 'wbp-prompts', img.alt));
    }
    this.node.replaceChildren(
      el('h2', '', d.name),
      table,
      ckpt,
      ...grid,
      el('h3', '', `Last ${d.events.length} events`),
      eventsTable(d.events)
    );
  }
}

/** A summary value as people read it: bytes, durations, 4 significant digits, nested k=v. */
function fmtValue(key: string, v: unknown): string {
  if (typeof v === 'number') {
    if (/^mem_|memory/.test(key)) {
      return fmtBytes(v);
    }
    if (key.endsWith('_s') && key.includes('time')) {
      return fmtDuration(v);
    }
    return Number.isInteger(v) || Math.abs(v) >= 1e5 ? v.toFixed(0) : fmtNumber(v, 4);
  }
  if (typeof v === 'object' && v !== null) {
    return Object.entries(v as Record<string, unknown>)
      .filter(([, x]) => x !== null && x !== undefined)
      .map(([k, x]) => `${k}=${fmtValue(k, x)}`)
      .join(', ');
  }
  return String(v);
}

const EVENT_COLUMNS = ['step', 'phase', 'loss', 'eval_loss', 'lr', 'grad_norm', 'tokens_per_s', 'samples_per_s',
  'mem_alloc', 'time'];

/** The events as a table, with the columns any of them has. */
function eventsTable(events: Record<string, unknown>[]): HTMLTableElement {
  const cols = EVENT_COLUMNS.filter(c => events.some(e => e[c] !== null && e[c] !== undefined));
  const table = el('table', 'wbp-events');
  const head = table.appendChild(el('tr'));
  cols.forEach(c => head.appendChild(el('th', '', c)));
  for (const e of events) {
    const tr = table.appendChild(el('tr'));
    cols.forEach(c => tr.appendChild(el('td', '', e[c] === null || e[c] === undefined ? '' : fmtValue(c, e[c]))));
  }
  return table;
}

export function summaryWidget(path: string, name: string): MainAreaWidget<SummaryView> {
  const content = new SummaryView(path);
  const widget = new MainAreaWidget({ content });
  widget.id = `gaudi-workbench-summary-${path}`;
  widget.title.label = `Run ${name}`;
  widget.title.closable = true;
  widget.toolbar.addItem(
    'refresh',
    new ToolbarButton({ icon: refreshIcon, tooltip: 'Read the run again', onClick: () => void content.load() })
  );
  return widget;
}
