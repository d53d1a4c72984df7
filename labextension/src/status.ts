// The status-bar item: the training run's step/total, ETA and device memory; a click opens
// the panel. With no run training it says so in one word.
import { Widget } from '@lumino/widgets';

import { el, fmtBytes, fmtBytesOf, fmtDuration } from './format';
import { RunsModel } from './model';

export class WorkbenchStatus extends Widget {
  constructor(private readonly runs: RunsModel, onClick: () => void) {
    super();
    this.addClass('wbp-status-item');
    this.node.title = 'Gaudi Workbench: click to open the panel';
    this._text = this.node.appendChild(el('span', 'wbp-status-text'));
    this.node.onclick = onClick;
    runs.changed.connect(this._render, this);
    this._render();
  }

  private _render(): void {
    const training = this.runs.training;
    if (!training.length) {
      this._text.textContent = 'Workbench: idle';
      this.node.dataset.training = '0';
      return;
    }
    const r = training[0];
    const parts = [`${r.model} step ${r.step}/${r.max_steps ?? '?'}`];
    if (r.eta_s !== null) {
      parts.push(`ETA ${fmtDuration(r.eta_s)}`);
    }
    if (r.mem_alloc !== null) {
      parts.push(r.mem_total ? fmtBytesOf(r.mem_alloc, r.mem_total) : fmtBytes(r.mem_alloc));
    }
    const others = training.length > 1 ? ` (+${training.length - 1} more)` : '';
    this._text.textContent = `Workbench: ${parts.join(' · ')}${others}`;
    this.node.dataset.training = String(training.length);
  }

  private _text: HTMLElement;
}
