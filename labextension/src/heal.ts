// A notebook saved while a run trained holds the run's live widget; reopened after the run
// ended, no kernel has that widget's model ("Error displaying widget: model not found"). The
// dashboard puts the run's directory beside the widget (RUN_MIME, workbench/views/
// dashboard.py): once the notebook's content is loaded, each such output whose run has ended
// becomes the run's saved output (the finished chart, or its picture where scripts do not
// run), read from the server (workbench/saved). A run still training keeps its widget.
import { NotebookPanel } from '@jupyterlab/notebook';

import { request } from './api';

export const RUN_MIME = 'application/vnd.gaudi-workbench.run+json';
export const SAVED_MIME = 'application/vnd.gaudi-workbench.widget+json';
const WIDGET_MIME = 'application/vnd.jupyter.widget-view+json';

/** What is used here of a code cell's model (@jupyterlab/cells' ICodeCellModel). */
interface ICodeCellModel {
  type: string;
  outputs: {
    length: number;
    get(index: number): { data: Record<string, unknown> };
    set(index: number, output: Record<string, unknown>): void;
  };
}

interface ISaved {
  path: string;
  status: string;
  output: Record<string, string> | null;
}

export async function healSavedRuns(panel: NotebookPanel): Promise<void> {
  await panel.context.ready;
  const model = panel.content.model;
  if (!model) {
    return;
  }
  const found: { cell: ICodeCellModel; index: number; path: string }[] = [];
  for (const each of model.cells) {
    const cell = each as unknown as ICodeCellModel;
    if (cell.type !== 'code') {
      continue;
    }
    const outputs = cell.outputs;
    for (let index = 0; index < outputs.length; index++) {
      const data = outputs.get(index).data;
      const run = data[RUN_MIME] as { path?: string } | undefined;
      if (run?.path && data[WIDGET_MIME]) {
        found.push({ cell, index, path: run.path });
      }
    }
  }
  for (const { cell, index, path } of found) {
    let saved: ISaved;
    try {
      saved = await request<ISaved>(`saved?path=${encodeURIComponent(path)}`);
    } catch (error) {
      // a run outside the server's root, or deleted: the output stays as saved
      console.warn(`gaudi-workbench: no saved output for ${path}:`, error);
      continue;
    }
    const now = cell.outputs.length > index ? cell.outputs.get(index).data : {};
    if (saved.output && (now[RUN_MIME] as { path?: string } | undefined)?.path === path) {
      const dirty = model.dirty;
      cell.outputs.set(index, { output_type: 'display_data', data: saved.output, metadata: {} });
      model.dirty = dirty; // the file is as it was; the page shows what it stands for
    }
  }
}

/** What is used here of one output of a code cell. */
interface IOutput {
  data: Record<string, unknown>;
  toJSON(): Record<string, unknown>;
}

/**
 * The pickers and the training form are ipywidgets whose models live in the kernel that made
 * them: reopened after that kernel is gone, their outputs read "Error displaying widget: model
 * not found". Each such output carries its saved view beside the widget view (text/html, and
 * SAVED_MIME naming the widget's model; workbench/forms/composite.py). Once the notebook's
 * content is loaded, before the widget manager can have asked the kernel for its models, each
 * becomes its saved view; then, where the notebook's kernel still holds the model (the page was
 * reloaded, the kernel lives on: its comms, from a comm_info_request, name the model), the
 * widget comes back. The notebook stays as clean or dirty as it opened.
 */
export async function healSavedWidgets(panel: NotebookPanel): Promise<void> {
  await panel.context.ready;
  const model = panel.content.model;
  if (!model) {
    return;
  }
  const dirty = model.dirty;
  const saved: { cell: ICodeCellModel; index: number; modelId: string; output: IOutput }[] = [];
  for (const each of model.cells) {
    const cell = each as unknown as ICodeCellModel;
    if (cell.type !== 'code') {
      continue;
    }
    for (let index = 0; index < cell.outputs.length; index++) {
      const output = cell.outputs.get(index) as IOutput;
      const mark = output.data[SAVED_MIME] as { model_id?: string } | undefined;
      if (mark?.model_id && output.data[WIDGET_MIME] && output.data['text/html']) {
        const json = output.toJSON();
        const data = { ...output.data };
        delete data[WIDGET_MIME];
        delete data[SAVED_MIME];
        cell.outputs.set(index, { ...json, data });
        saved.push({ cell, index, modelId: mark.model_id, output: json as unknown as IOutput });
      }
    }
  }
  model.dirty = dirty;
  if (!saved.length) {
    return;
  }
  await panel.sessionContext.ready;
  const kernel = panel.sessionContext.session?.kernel;
  if (!kernel) {
    return;
  }
  let comms: Record<string, unknown>;
  try {
    const reply = await kernel.requestCommInfo({ target_name: 'jupyter.widget' });
    comms = reply.content.status === 'ok' ? reply.content.comms : {};
  } catch (error) {
    console.warn('gaudi-workbench: the kernel did not list its widgets:', error);
    return;
  }
  const before = model.dirty;
  for (const { cell, index, modelId, output } of saved) {
    const now = cell.outputs.length > index ? cell.outputs.get(index).data : {};
    if (modelId in comms && !now[WIDGET_MIME] && now[SAVED_MIME] === undefined) {
      cell.outputs.set(index, output as unknown as Record<string, unknown>);
    }
  }
  model.dirty = before;
}
