// The server extension's REST API (workbench/server/): its JSON shapes and one request helper.
// Every request goes through ServerConnection, so it carries the server's token or XSRF
// cookie like JupyterLab's own requests.
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** One device as the server's monitor reads it (null: the device does not report it). */
export interface IDevice {
  kind: string;
  index: number;
  name: string;
  util_pct: number | null;
  mem_used: number | null;
  mem_total: number | null;
  power_w: number | null;
  temp_c: number | null;
}

/** A backend that reports nothing here, and why (with the fix). */
export interface INote {
  kind: string;
  title: string;
  why: string;
}

export interface IDevices {
  time: number;
  devices: IDevice[];
  notes: INote[];
}

/** A process holding a card (from the OS); a kernel of this server has its id and notebook. */
export interface ICardHolder {
  pid: number;
  command: string;
  user: string | null; // the process's owner (the OS's user name)
  kernel_id: string | null;
  notebook: string | null;
  this_server: boolean;
}

/** One device card, free or held (workbench/cards). */
export interface ICard {
  kind: string;
  index: number;
  name: string;
  title: string;
  module: number | null;
  free: boolean;
  holders: ICardHolder[];
}

export interface ICards {
  cards: ICard[];
  notes: INote[];
}

/** One run directory under the server's root, as the panel lists it. */
export interface IRun {
  path: string;
  name: string;
  status: 'running' | 'completed' | 'stopped' | 'failed' | 'prepared' | string;
  step: number;
  max_steps: number | null;
  loss: number | null;
  loss_series: [number, number][];
  tokens_per_s: number | null;
  samples_per_s: number | null;
  device: string | null;
  mem_alloc: number | null;
  mem_total: number | null;
  eta_s: number | null;
  error: string | null;
  model: string;
  data: string;
  updated: number | null;
}

export interface IRunDetail {
  path: string;
  name: string;
  status: string;
  summary: Record<string, unknown>;
  spec: Record<string, unknown>;
  events: Record<string, unknown>[];
  checkpoints: string[];
  /** A text-to-image run's latest sample grid (base64 PNG), or null. */
  samples: { step: number; prompts: string[]; image: string } | null;
}

/** GET or POST ``workbench/<endpoint>``; the JSON reply, or an error carrying the server's message. */
export async function request<T>(endpoint: string, init: RequestInit = {}): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'workbench', endpoint);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  const text = await response.text();
  let data: any = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { message: text };
    }
  }
  if (!response.ok) {
    throw new ServerConnection.ResponseError(response, data?.message ?? response.statusText);
  }
  return data as T;
}

export const api = {
  devices: () => request<IDevices>('devices'),
  cards: () => request<ICards>('cards'),
  runs: () => request<{ runs: IRun[] }>('runs'),
  run: (path: string) => request<IRunDetail>(`run?path=${encodeURIComponent(path)}`),
  stop: (path: string) =>
    request<{ path: string; status: string; stopping: boolean }>('stop', {
      method: 'POST',
      body: JSON.stringify({ path })
    })
};
