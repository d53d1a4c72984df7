"""The Jupyter server extension behind the JupyterLab side panel: devices and runs as JSON.

Endpoints, under the server's base URL (every one needs a logged-in user):

- ``GET workbench/devices``: ``{"time", "devices": [...], "notes": [...]}`` (``device.monitor_all``)
- ``GET workbench/cards``: ``{"cards": [...], "notes": [...]}``, each card free or held, a holder
  that is a kernel of this server with its ``kernel_id`` and ``notebook`` (``holders``)
- ``GET workbench/runs``: ``{"runs": [row, ...]}``, every run under the server's root, newest first
- ``GET workbench/run?path=<rel>``: one run's summary, spec, last events, checkpoints and latest
  sample grid
- ``POST workbench/stop`` with ``{"path": <rel>}``: writes the run's STOP file

Serving them imports no torch, transformers, datasets or Habana bridge: device readings
come from the vendors' management libraries (``monitor``), runs from their files.
Installed with ``pip install 'gaudi-workbench[lab]'``; the package ships the config file
that enables it (``jupyter-config/server-config/gaudi_workbench.json``).
"""

from __future__ import annotations

from typing import Any

from .runs import RunTable


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """Where jupyter_server finds this extension (its "Authoring a server extension" guide)."""
    return [{"module": "workbench.server"}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """The built JupyterLab extension inside the package (``workbench/server/labextension``)."""
    return [{"src": "labextension", "dest": "gaudi-workbench"}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    """Register the endpoints on the server's web application; keep the kernels' busy state
    true while a widget opens a subshell (``kernelstate``)."""
    from .handlers import handlers
    from .kernelstate import untrack_subshell_messages

    web_app = server_app.web_app
    table = RunTable(server_app.root_dir)
    web_app.add_handlers(".*$", handlers(web_app.settings["base_url"], table))
    server_app.log.info(f"workbench: serving devices and the runs under {table.root}")
    added = untrack_subshell_messages(server_app)
    if added:
        server_app.log.info(f"workbench: kernel status from {', '.join(added)} left untracked")
