"""The Jupyter server extension behind the JupyterLab side panel: devices and runs as JSON.

Endpoints, under the server's base URL (every one needs a logged-in user): ``GET
workbench/devices``, ``workbench/cards``, ``workbench/runs``, ``workbench/run?path=<rel>`` and
``POST workbench/stop`` with ``{"path": <rel>}`` (``handlers``). Serving them imports no torch,
transformers, datasets or Habana bridge. Installed with ``pip install 'gaudi-workbench[lab]'``
(``jupyter-config/server-config/gaudi_workbench.json`` enables it).
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
