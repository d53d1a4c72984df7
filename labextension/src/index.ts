// Gaudi Workbench in JupyterLab: the Workbench side panel (left sidebar) with the live
// device monitor and every run under the server's root, a status-bar item for the run that
// trains, and a command to open the panel. The data comes from the server extension
// (workbench/server/) over Jupyter's authenticated REST API.
import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, Notification } from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import { INotebookTracker, NotebookActions } from '@jupyterlab/notebook';
import { IStatusBar } from '@jupyterlab/statusbar';
import { LabIcon } from '@jupyterlab/ui-components';

import { healSavedRuns, healSavedWidgets } from './heal';
import { DevicesModel, RunsModel } from './model';
import { WorkbenchPanel } from './panel';
import { WorkbenchStatus } from './status';
import { summaryWidget } from './summary';

// A chip with pins and a rising line: the workbench's mark in the sidebar.
const ICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16">
<g class="jp-icon3" fill="#616161"><rect x="5" y="5" width="14" height="14" rx="2" fill="none"
stroke="#616161" stroke-width="2"/><path d="M8 1h2v3H8zM14 1h2v3h-2zM8 20h2v3H8zM14 20h2v3h-2zM1 8h3v2H1zM1 14h3v2H1zM20 8h3v2h-3zM20 14h3v2h-3z"/>
<path d="M8 15l3-4 2 2 3-5" fill="none" stroke="#616161" stroke-width="1.8"/></g></svg>`;

export const workbenchIcon = new LabIcon({ name: 'gaudi-workbench:icon', svgstr: ICON_SVG });

const OPEN = 'gaudi-workbench:open-panel';

function pythonString(s: string): string {
  return JSON.stringify(s); // JSON's escapes are valid in a Python string literal
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'gaudi-workbench:plugin',
  description: 'The Workbench panel (devices and runs) and status-bar item of Gaudi Workbench.',
  autoStart: true,
  optional: [ILayoutRestorer, INotebookTracker, IStatusBar, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    notebooks: INotebookTracker | null,
    statusBar: IStatusBar | null,
    palette: ICommandPalette | null
  ) => {
    const devices = new DevicesModel();
    const runs = new RunsModel();

    const insertCode = (kind: 'open' | 'compare', paths: string[]) => {
      const nb = notebooks?.currentWidget;
      if (!nb) {
        Notification.warning('Open a notebook first: the code goes into the active notebook.', {
          autoClose: 5000
        });
        return;
      }
      // paths are under the server root; the kernel runs in the notebook's directory
      const here = PathExt.dirname(nb.context.path);
      const rel = paths.map(p => pythonString(here ? PathExt.relative(here, p) : p));
      const code =
        kind === 'open'
          ? `import workbench as wb\n\nrun = wb.Run.open(${rel[0]})\nrun`
          : `import workbench as wb\n\nwb.compare(${rel.join(', ')})`;
      NotebookActions.insertBelow(nb.content);
      nb.content.activeCell?.model.sharedModel.setSource(code);
      app.shell.activateById(nb.id);
    };

    const panel = new WorkbenchPanel(devices, runs, {
      openSummary: run => {
        const widget = summaryWidget(run.path, run.name);
        const open = Array.from(app.shell.widgets('main')).find(w => w.id === widget.id);
        if (open) {
          widget.dispose();
          app.shell.activateById(open.id);
          return;
        }
        app.shell.add(widget, 'main');
      },
      insertCode,
      shutdownKernel: id => app.serviceManager.kernels.shutdown(id)
    });
    panel.title.icon = workbenchIcon;
    panel.title.caption = 'Gaudi Workbench: devices and runs';
    app.shell.add(panel, 'left', { rank: 600 });
    restorer?.add(panel, 'gaudi-workbench-panel');

    app.commands.addCommand(OPEN, {
      label: 'Open the Workbench Panel',
      caption: 'Devices and training runs of Gaudi Workbench',
      execute: () => app.shell.activateById(panel.id)
    });
    palette?.addItem({ command: OPEN, category: 'Gaudi Workbench' });

    // the notebook kernels executing now: the runs poll faster while one is (RunsModel)
    const busy = new Set<string>();
    notebooks?.widgetAdded.connect((_, nbPanel) => {
      void healSavedRuns(nbPanel);
      void healSavedWidgets(nbPanel);
      const update = () => {
        if (nbPanel.sessionContext.kernelDisplayStatus === 'busy') {
          busy.add(nbPanel.id);
        } else {
          busy.delete(nbPanel.id);
        }
        runs.busyKernels = busy.size;
      };
      nbPanel.sessionContext.statusChanged.connect(update);
      nbPanel.disposed.connect(() => {
        busy.delete(nbPanel.id);
        runs.busyKernels = busy.size;
      });
    });

    if (statusBar) {
      const item = new WorkbenchStatus(runs, () => void app.commands.execute(OPEN));
      statusBar.registerStatusItem('gaudi-workbench:status', { item, align: 'left', rank: 5 });
    }
  }
};

export default plugin;
