// A notebook saved while a run trained holds the run's live widget; reopened after the run
// ended, no kernel has that widget's model ("Error displaying widget: model not found"). The
// dashboard puts the run's directory beside the widget (RUN_MIME, workbench/views/
// dashboard.py): once the notebook's content is loaded, each such output whose run has ended
// becomes the run's saved output (the finished chart, or its picture where scripts do not
// run), read from the server (workbench/saved). A run still training keeps its widget.
import { NotebookPanel } from '@jupyterlab/notebook';

import { request } from './api';

export const RUN_MIME = 'application/vnd.gaudi-workbench.run+json';
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
      cell.outputs.set(index, { output_type: 'display_data', data: saved.output, metadata: {} });
    }
  }
}
