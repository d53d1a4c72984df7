// The Workbench side panel: the live device monitor above, every run under the server's
// root below. Cards are keyed (device kind:index, run path) and updated in place, so a
// button never moves or is rebuilt under the pointer between two polls.
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { api, ICard, ICardHolder, IDevice, IRun } from './api';
import {
  drawSparkline, el, firstLine, fmtBytes, fmtBytesOf, fmtDuration, fmtNumber, fmtThroughput, sparkline
} from './format';
import { describe, DevicesModel, RunsModel } from './model';

/** What the panel asks of the application (kept small so the panel stays testable). */
export interface IPanelActions {
  /** Open a run's summary in the main area. */
  openSummary(run: IRun): void;
  /** Insert code into the active notebook (``paths`` are run paths under the server root). */
  insertCode(kind: 'open' | 'compare', paths: string[]): void;
  /** Shut down one of this server's kernels (it frees the card it holds). */
  shutdownKernel(kernelId: string): Promise<void>;
}

const TITLES: Record<string, string> = { hpu: 'Gaudi', cuda: 'GPU', cpu: 'CPU' };

export class WorkbenchPanel extends Widget {
  constructor(
    readonly devices: DevicesModel,
    readonly runs: RunsModel,
    private readonly actions: IPanelActions
  ) {
    super();
    this.id = 'gaudi-workbench-panel';
    this.addClass('wbp-side');
    const root = this.node;
    root.appendChild(el('div', 'wbp-side-title', 'Gaudi Workbench'));

    const dev = root.appendChild(el('section', 'wbp-section wbp-devices'));
    dev.appendChild(el('h3', 'wbp-section-title', 'Devices'));
    this._deviceList = dev.appendChild(el('div', 'wbp-device-list'));
    this._cardList = dev.appendChild(el('div', 'wbp-card-list'));
    this._notes = dev.appendChild(el('div', 'wbp-notes'));
    this._devError = dev.appendChild(el('div', 'wbp-error'));

    const runsSection = root.appendChild(el('section', 'wbp-section wbp-runs'));
    const head = runsSection.appendChild(el('h3', 'wbp-section-title', 'Runs'));
    this._compare = head.appendChild(el('button', 'jp-mod-styled wbp-compare', 'Compare selected'));
    this._compare.title = 'Insert wb.compare(...) of the ticked runs into the active notebook';
    this._compare.onclick = () => this.actions.insertCode('compare', [...this._selected]);
    this._runList = runsSection.appendChild(el('div', 'wbp-run-list'));
    this._empty = runsSection.appendChild(
      el('div', 'wbp-empty', 'No runs under this server\'s root yet: wb.train(...) writes them to ./runs.')
    );
    this._runError = runsSection.appendChild(el('div', 'wbp-error'));

    devices.changed.connect(this._renderDevices, this);
    runs.changed.connect(this._renderRuns, this);
    this._renderRuns();
  }

  dispose(): void {
    this.devices.stop();
    this.runs.watched = false;
    super.dispose();
  }

  protected onAfterShow(): void {
    this.devices.start();
    this.runs.watched = true;
  }

  protected onAfterHide(): void {
    this.devices.stop();
    this.runs.watched = false;
  }

  // ------------------------------------------------------------------ devices
  private _renderDevices(): void {
    const seen = new Set<string>();
    for (const d of this.devices.devices) {
      const key = `${d.kind}:${d.index}`;
      seen.add(key);
      let card = this._deviceCards.get(key);
      if (!card) {
        card = this._deviceCard(d);
        this._deviceCards.set(key, card);
        this._deviceList.appendChild(card.node);
      }
      this._updateDevice(card, d, key);
    }
    for (const [key, card] of this._deviceCards) {
      if (!seen.has(key)) {
        card.node.remove();
        this._deviceCards.delete(key);
      }
    }
    this._cardList.replaceChildren(...this.devices.cards.map(c => this._cardRow(c)));
    this._notes.replaceChildren(
      ...this.devices.notes.map(n => {
        const line = el('div', 'wbp-note');
        line.dataset.kind = n.kind;
        line.append(el('b', '', `${n.title}: `), document.createTextNode(n.why));
        return line;
      })
    );
    this._devError.textContent = this.devices.error;
  }

  /** One card: free, or each holder (pid, user, and the notebook when it is a kernel of this
   *  server, with a button that shuts that kernel down after a confirmation). */
  private _cardRow(c: ICard): HTMLElement {
    const row = el('div', 'wbp-card');
    row.dataset.kind = c.kind;
    row.dataset.index = String(c.index);
    row.dataset.free = String(c.free);
    row.appendChild(el('span', 'wbp-card-title', `${c.title} · `));
    if (c.free) {
      row.appendChild(el('span', 'wbp-card-free', 'free'));
      return row;
    }
    for (const h of c.holders) {
      const pid = h.user ? `pid ${h.pid} (${h.user})` : `pid ${h.pid}`;
      const who = h.notebook
        ? `held by ${pid}, kernel of ${h.notebook}`
        : `held by ${pid}: ${h.command}`;
      const line = row.appendChild(el('span', 'wbp-card-holder', who));
      line.title = h.command;
      if (h.this_server && h.kernel_id) {
        const button = row.appendChild(
          el('button', 'jp-mod-styled jp-mod-warn wbp-card-shutdown', 'Shut down kernel')
        );
        button.title = 'Shut this kernel down: it frees the card (its variables are lost)';
        button.onclick = () => void this._shutdown(c, h, button);
      }
    }
    return row;
  }

  private async _shutdown(c: ICard, h: ICardHolder, button: HTMLButtonElement): Promise<void> {
    const answer = await showDialog({
      title: 'Shut down this kernel?',
      body: `The kernel of ${h.notebook ?? 'pid ' + h.pid} holds ${c.title}. Shutting it down frees the card; the notebook's variables are lost.`,
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Shut down' })]
    });
    if (!answer.button.accept || !h.kernel_id) {
      return;
    }
    button.disabled = true;
    try {
      await this.actions.shutdownKernel(h.kernel_id);
      this.devices.refreshCards();
    } catch (error) {
      button.disabled = false;
      Notification.error(`Could not shut down the kernel: ${describe(error)}`, { autoClose: 8000 });
    }
  }

  private _deviceCard(d: IDevice): IDeviceCard {
    const node = el('div', 'wbp-device');
    node.dataset.kind = d.kind;
    node.dataset.index = String(d.index);
    const name = node.appendChild(el('div', 'wbp-device-name'));
    const row = (label: string, cls: string) => {
      const r = node.appendChild(el('div', 'wbp-metric'));
      r.appendChild(el('span', 'wbp-label', label));
      const value = r.appendChild(el('span', `wbp-value ${cls}`));
      const spark = r.appendChild(sparkline(cls, 64, 20));
      return { value, spark };
    };
    const util = row('util', 'wbp-util');
    const mem = row('mem', 'wbp-mem');
    const extra = node.appendChild(el('div', 'wbp-metric wbp-extra'));
    return { node, name, util: util.value, utilSpark: util.spark, mem: mem.value, memSpark: mem.spark, extra };
  }

  private _updateDevice(card: IDeviceCard, d: IDevice, key: string): void {
    card.name.textContent = `${TITLES[d.kind] ?? d.kind} ${d.index} · ${d.name}`;
    card.name.title = d.name;
    card.util.textContent = d.util_pct === null ? 'not reported' : `${d.util_pct.toFixed(0)}%`;
    card.mem.textContent =
      d.mem_used === null ? 'not reported' : fmtBytesOf(d.mem_used, d.mem_total);
    const h = this.devices.history.get(key);
    if (h) {
      drawSparkline(card.utilSpark, h.util, undefined, 0, 100);
      drawSparkline(card.memSpark, h.mem, undefined, 0, d.mem_total ?? undefined);
    }
    const extra = [];
    if (d.power_w !== null) {
      extra.push(`${d.power_w.toFixed(0)} W`);
    }
    if (d.temp_c !== null) {
      extra.push(`${d.temp_c.toFixed(0)} °C`);
    }
    card.extra.textContent = extra.join(' · ');
    card.extra.hidden = extra.length === 0;
  }

  // ------------------------------------------------------------------ runs
  private _renderRuns(): void {
    const seen = new Set<string>();
    let previous: HTMLElement | null = null;
    for (const r of this.runs.runs) {
      seen.add(r.path);
      let card = this._runCards.get(r.path);
      if (!card) {
        card = this._runCard(r);
        this._runCards.set(r.path, card);
      }
      this._updateRun(card, r);
      // keep the server's order (newest first) without moving cards that are in place
      const want: ChildNode | null = previous ? previous.nextSibling : this._runList.firstChild;
      if (want !== card.node) {
        this._runList.insertBefore(card.node, want);
      }
      previous = card.node;
    }
    for (const [path, card] of this._runCards) {
      if (!seen.has(path)) {
        card.node.remove();
        this._runCards.delete(path);
        this._selected.delete(path);
      }
    }
    this._empty.hidden = this.runs.runs.length > 0 || !!this.runs.error;
    this._runError.textContent = this.runs.error;
    this._compare.disabled = this._selected.size < 1;
  }

  private _runCard(r: IRun): IRunCard {
    const node = el('div', 'wbp-run');
    node.dataset.path = r.path;
    const head = node.appendChild(el('div', 'wbp-run-head'));
    const select = head.appendChild(el('input', 'wbp-select'));
    select.type = 'checkbox';
    select.title = 'Tick runs to compare them';
    select.onchange = () => {
      if (select.checked) {
        this._selected.add(r.path);
      } else {
        this._selected.delete(r.path);
      }
      this._compare.disabled = this._selected.size < 1;
    };
    const status = head.appendChild(el('span', 'wbp-status'));
    const name = head.appendChild(el('span', 'wbp-run-name', r.name));
    name.title = r.path;
    const what = node.appendChild(el('div', 'wbp-run-what'));
    const stats = node.appendChild(el('div', 'wbp-run-stats'));
    const text = stats.appendChild(el('div', 'wbp-stat-text'));
    const step = text.appendChild(el('span', 'wbp-step'));
    const loss = text.appendChild(el('span', 'wbp-loss'));
    const spark = stats.appendChild(sparkline('wbp-loss-spark', 64, 20));
    const more = node.appendChild(el('div', 'wbp-run-more'));
    const error = node.appendChild(el('div', 'wbp-run-error'));
    const actions = node.appendChild(el('div', 'wbp-run-actions'));
    const stop = actions.appendChild(el('button', 'jp-mod-styled jp-mod-warn wbp-stop', 'Stop'));
    stop.title = 'Stop after the current step, with a checkpoint (writes the run\'s STOP file)';
    stop.onclick = () => void this._stop(r.path, stop);
    const summary = actions.appendChild(el('button', 'jp-mod-styled wbp-summary', 'Summary'));
    summary.onclick = () => this.actions.openSummary(this._runCards.get(r.path)!.run);
    const insert = actions.appendChild(el('button', 'jp-mod-styled wbp-insert', 'Insert code'));
    insert.title = 'Insert run = wb.Run.open(...) into the active notebook';
    insert.onclick = () => this.actions.insertCode('open', [r.path]);
    return { node, run: r, status, what, step, loss, spark, more, error, stop };
  }

  private _updateRun(card: IRunCard, r: IRun): void {
    card.run = r;
    card.node.dataset.status = r.status;
    card.status.textContent = r.status;
    card.status.dataset.status = r.status;
    card.what.textContent = `${r.model} · ${r.data}`;
    card.step.textContent = `step ${r.step}/${r.max_steps ?? '?'}`;
    card.loss.textContent = `loss ${fmtNumber(r.loss)}`;
    drawSparkline(
      card.spark,
      r.loss_series.map(p => p[1]),
      r.loss_series.map(p => p[0])
    );
    const more = [fmtThroughput(r.tokens_per_s, r.samples_per_s), r.device ?? '–'];
    if (r.mem_alloc !== null) {
      more.push(`mem ${fmtBytes(r.mem_alloc)}`);
    }
    if (r.status === 'running' && r.eta_s !== null) {
      more.push(`ETA ${fmtDuration(r.eta_s)}`);
    }
    card.more.textContent = more.join(' · ');
    card.more.hidden = more.every(m => m === '–'); // a run that never logged a step
    // an error can run to hundreds of characters (a CUDA assert, a traceback's last line):
    // the card shows its first line, the whole on hover
    card.error.textContent = firstLine(r.error ?? '');
    card.error.title = r.error ?? '';
    card.error.hidden = !r.error;
    card.stop.hidden = r.status !== 'running';
    if (r.status !== 'running') {
      card.stop.disabled = false;
      card.stop.textContent = 'Stop';
    }
  }

  private async _stop(path: string, button: HTMLButtonElement): Promise<void> {
    button.disabled = true;
    button.textContent = 'Stopping…';
    try {
      await api.stop(path);
    } catch (error) {
      button.disabled = false;
      button.textContent = 'Stop';
      Notification.error(`Could not stop ${path}: ${describe(error)}`, { autoClose: 8000 });
    }
    this.runs.refresh();
  }

  private _deviceList: HTMLElement;
  private _cardList: HTMLElement;
  private _notes: HTMLElement;
  private _devError: HTMLElement;
  private _runList: HTMLElement;
  private _empty: HTMLElement;
  private _runError: HTMLElement;
  private _compare: HTMLButtonElement;
  private _deviceCards = new Map<string, IDeviceCard>();
  private _runCards = new Map<string, IRunCard>();
  private _selected = new Set<string>();
}

interface IDeviceCard {
  node: HTMLElement;
  name: HTMLElement;
  util: HTMLElement;
  utilSpark: SVGSVGElement;
  mem: HTMLElement;
  memSpark: SVGSVGElement;
  extra: HTMLElement;
}

interface IRunCard {
  node: HTMLElement;
  run: IRun;
  status: HTMLElement;
  what: HTMLElement;
  step: HTMLElement;
  loss: HTMLElement;
  spark: SVGSVGElement;
  more: HTMLElement;
  error: HTMLElement;
  stop: HTMLButtonElement;
}
