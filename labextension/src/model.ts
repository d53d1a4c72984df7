// What the panel and the status bar show, polled from the server extension.
//
// Two polls, each a Lumino Poll (backs off on errors, pauses while the browser tab is hidden):
//  - devices: once a second, and only while the panel is visible (reading NVML/HLML/psutil
//    costs the server something; nobody looks at a hidden panel); the cards and their holders
//    with every CARDS_EVERY-th reading, and at once after a kernel is shut down from the
//    panel (a holder changes when a kernel starts or ends, not every second, and finding
//    the holders reads every process's open files: 6 ms for 69 processes on the dev VM, so
//    tens of ms a second on a busy Gaudi node if asked every second);
//  - runs: once a second while the panel is visible, every 2 s while a run trains (the
//    status bar's step and ETA), every 15 s otherwise (to notice a run starting).
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { api, ICard, IDevice, IDevices, INote, IRun } from './api';

/** Seconds of device history the sparklines keep (one sample a second). */
export const HISTORY = 120;

/** The cards (who holds each) are read with every CARDS_EVERY-th device reading. */
export const CARDS_EVERY = 5;

export interface ISeries {
  util: number[];
  mem: number[];
}

export class DevicesModel {
  devices: IDevice[] = [];
  /** Every card and who holds it (workbench/cards), read with the devices. */
  cards: ICard[] = [];
  notes: INote[] = [];
  error = '';
  readonly history = new Map<string, ISeries>();

  constructor() {
    this._poll = new Poll<IDevices>({
      auto: false,
      name: 'gaudi-workbench:devices',
      factory: () => this._fetch(),
      frequency: { interval: 1000, backoff: true, max: 30_000 },
      standby: 'when-hidden'
    });
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get running(): boolean {
    return this._on;
  }

  /** Start polling (the panel became visible). */
  start(): void {
    if (!this._on) {
      this._on = true;
      this._readings = 0; // the cards come with the first reading
      void this._poll.start();
    }
  }

  /** Stop polling (the panel was hidden or closed). */
  stop(): void {
    if (this._on) {
      this._on = false;
      void this._poll.stop();
    }
  }

  dispose(): void {
    this._poll.dispose();
  }

  /** Read the cards with the next reading, and take it now (a holder has just changed). */
  refreshCards(): void {
    this._readings = 0;
    void this._poll.refresh();
  }

  private async _fetch(): Promise<IDevices> {
    try {
      const withCards = this._readings++ % CARDS_EVERY === 0;
      const [reply, cards] = await Promise.all([
        api.devices(),
        withCards ? api.cards() : Promise.resolve(null)
      ]);
      this.devices = reply.devices;
      if (cards) {
        this.cards = cards.cards;
      }
      this.notes = reply.notes;
      this.error = '';
      for (const d of reply.devices) {
        const key = `${d.kind}:${d.index}`;
        const s = this.history.get(key) ?? { util: [], mem: [] };
        s.util.push(d.util_pct ?? NaN);
        s.mem.push(d.mem_used ?? NaN);
        if (s.util.length > HISTORY) {
          s.util.shift();
          s.mem.shift();
        }
        this.history.set(key, s);
      }
      this._changed.emit();
      return reply;
    } catch (error) {
      this.error = describe(error);
      this._changed.emit();
      throw error;
    }
  }

  private _on = false;
  private _readings = 0;
  private _poll: Poll<IDevices>;
  private _changed = new Signal<this, void>(this);
}

export class RunsModel {
  runs: IRun[] = [];
  error = '';

  constructor() {
    this._poll = new Poll<void>({
      auto: true,
      name: 'gaudi-workbench:runs',
      factory: () => this._fetch(),
      frequency: { interval: 15_000, backoff: true, max: 60_000 },
      standby: 'when-hidden'
    });
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The runs training now, newest first. */
  get training(): IRun[] {
    return this.runs.filter(r => r.status === 'running');
  }

  /** The panel is visible (poll once a second) or not. */
  set watched(on: boolean) {
    this._watched = on;
    this._tune();
    if (on) {
      void this._poll.refresh();
    }
  }

  /** How many notebook kernels are executing: while one is, a run may start at any moment,
   * so the runs are polled every 2 s (at 15 s the status bar said "idle" for a run that
   * trained). */
  set busyKernels(n: number) {
    const was = this._busy > 0;
    this._busy = n;
    this._tune();
    if (n > 0 && !was) {
      void this._poll.refresh();
    }
  }

  /** Poll now (after a stop request, to show its effect without waiting). */
  refresh(): void {
    void this._poll.refresh();
  }

  dispose(): void {
    this._poll.dispose();
  }

  private _tune(): void {
    const interval = this._watched ? 1000 : this.training.length || this._busy ? 2000 : 15_000;
    if (this._poll.frequency.interval !== interval) {
      this._poll.frequency = { interval, backoff: true, max: 60_000 };
    }
  }

  private async _fetch(): Promise<void> {
    try {
      this.runs = (await api.runs()).runs;
      this.error = '';
    } catch (error) {
      this.error = describe(error);
      this._changed.emit();
      throw error;
    }
    this._tune();
    this._changed.emit();
  }

  private _watched = false;
  private _busy = 0;
  private _poll: Poll<void>;
  private _changed = new Signal<this, void>(this);
}

/** A request's failure in words, with the fix where the cause is known. */
export function describe(error: unknown): string {
  const status = (error as any)?.response?.status;
  if (status === 404) {
    return (
      'The workbench server extension is not running on this server. Enable it and restart ' +
      'JupyterLab: jupyter server extension enable workbench.server'
    );
  }
  if (status === 403 || status === 401) {
    return 'The server refused the request (not logged in?): reload the page.';
  }
  return (error as any)?.message ?? String(error);
}
