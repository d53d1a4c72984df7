"""The HTTP side of the extension: one Jupyter ``APIHandler`` per endpoint, JSON in and out,
every verb for a logged-in user; an error's message says what to send instead.
"""

from __future__ import annotations

import json
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler

from ..backends.registry import monitor_all
from .holders import server_cards, with_allocator_memory
from .runs import BadPath, NotFound, NotRunning, RunTable

PATH_HINT = (
    'send {"path": "<run directory relative to the server root>"}, as workbench/runs lists it'
)


class _Handler(APIHandler):
    """Holds the server's ``RunTable`` and answers JSON."""

    def initialize(self, table: RunTable) -> None:
        self.table = table

    def reply(self, data: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))

    def answer(self, fn, *args) -> None:
        """``fn(*args)`` as the reply; the table's refusals as 400, 404 and 409."""
        try:
            data = fn(*args)
        except BadPath as e:
            raise tornado.web.HTTPError(400, str(e)) from None
        except NotFound as e:
            raise tornado.web.HTTPError(404, str(e)) from None
        except NotRunning as e:
            raise tornado.web.HTTPError(409, str(e)) from None
        self.reply(data)


class DevicesHandler(_Handler):
    """``GET workbench/devices``: every device's reading, and why a kind is missing."""

    @tornado.web.authenticated
    def get(self) -> None:
        self.reply(with_allocator_memory(monitor_all(), self.table.memory_by_writer))


class CardsHandler(_Handler):
    """``GET workbench/cards``: every card, free or held (pid, command line, and the kernel
    and notebook when the holder is one of this server's kernels)."""

    @tornado.web.authenticated
    async def get(self) -> None:
        self.reply(await server_cards(self.kernel_manager, self.session_manager))


class RunsHandler(_Handler):
    """``GET workbench/runs``: every run under the root, newest first."""

    @tornado.web.authenticated
    def get(self) -> None:
        self.reply({"runs": self.table.rows()})


class RunHandler(_Handler):
    """``GET workbench/run?path=<rel>``: one run's summary, spec, last events, checkpoints."""

    @tornado.web.authenticated
    def get(self) -> None:
        rel = self.get_query_argument("path", None)
        if rel is None:
            raise tornado.web.HTTPError(
                400,
                "missing query argument 'path': ask for workbench/run?path=<run "
                "directory relative to the server root>, as workbench/runs lists it",
            )
        self.answer(self.table.detail, rel)


class SavedHandler(_Handler):
    """``GET workbench/saved?path=<absolute run directory>``: an ended run's saved output
    (``output``: a mime bundle; null while it runs), for a notebook saved mid-run."""

    @tornado.web.authenticated
    def get(self) -> None:
        full = self.get_query_argument("path", None)
        if full is None:
            raise tornado.web.HTTPError(
                400,
                "missing query argument 'path': ask for workbench/saved?path=<the run "
                "directory's absolute path, as the dashboard's output names it>",
            )
        self.answer(self.table.saved, full)


class StopHandler(_Handler):
    """``POST workbench/stop`` with ``{"path": rel}``: ask a running run to stop after its step."""

    @tornado.web.authenticated
    def post(self) -> None:
        try:
            body = json.loads(self.request.body or b"")
        except ValueError:
            body = None
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("path"), str)
            or not body["path"].strip()
        ):
            raise tornado.web.HTTPError(400, f"the body needs 'path': {PATH_HINT}")
        self.answer(self.table.stop, body["path"])


def handlers(base_url: str, table: RunTable) -> list[tuple[str, type, dict]]:
    """The URL rules, under ``<base_url>/workbench/``."""
    from jupyter_server.utils import url_path_join

    kwargs = {"table": table}
    return [
        (url_path_join(base_url, "workbench", name), cls, kwargs)
        for name, cls in (
            ("devices", DevicesHandler),
            ("cards", CardsHandler),
            ("runs", RunsHandler),
            ("run", RunHandler),
            ("saved", SavedHandler),
            ("stop", StopHandler),
        )
    ]
