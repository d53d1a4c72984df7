// A run's summary in the main area: status, the summary's figures, checkpoints, the last
// events. Read from the server once when opened and again on Refresh.
import { MainAreaWidget } from '@jupyterlab/apputils';
import { refreshIcon, ToolbarButton } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { api, IRunDetail } from './api';
import { el } from './format';
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
    const rows: [string, unknown][] = [
      ['run', d.name],
      ['path', d.path],
      ['status', d.status],
      ...Object.entries(d.summary).filter(([k]) => k !== 'status')
    ];
    const table = el('table', 'wbp-kv');
    for (const [k, v] of rows) {
      const tr = table.appendChild(el('tr'));
      tr.appendChild(el('th', '', k));
      tr.appendChild(el('td', '', typeof v === 'object' && v !== null ? JSON.stringify(v) : String(v)));
    }
    const ckpt = el('p', '', `Checkpoints: ${d.checkpoints.length ? d.checkpoints.join(', ') : 'none'}`);
    const events = el('pre', 'wbp-events');
    events.textContent = d.events.map(e => JSON.stringify(e)).join('\n');
    this.node.replaceChildren(
      el('h2', '', d.name),
      table,
      ckpt,
      el('h3', '', `Last ${d.events.length} events`),
      events
    );
  }
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
