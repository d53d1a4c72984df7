"""Unhandled exceptions, as the process reports them, handed to whoever watches for them.

The Trainer calls no callback on an error, and an attached run neither wraps nor patches the
user's Trainer, so it reads the exception where the process reports it as unhandled:
``sys.excepthook``, ``threading.excepthook`` and IPython's ``post_run_cell``. Each hook chains
to the one it replaced, does nothing while nobody watches, and is put back if still in place.
"""

from __future__ import annotations

import atexit
import contextlib
import sys
import threading
import weakref
from typing import Protocol


class Watcher(Protocol):
    def uncaught(self, error: BaseException, thread: threading.Thread) -> None:
        """``error`` went unhandled in ``thread``: the watcher decides whether it is its own."""


# weak: a watcher dropped (its Trainer gone) is no longer told anything
_WATCHERS: weakref.WeakSet = weakref.WeakSet()
_EXITING = False  # set as the interpreter exits, before weakref.finalize's own exit hook
_EXIT_HOOKED = False


def watch(watcher: Watcher) -> None:
    """Tell ``watcher`` of every unhandled exception from now on (the hooks installed, again
    where replaced since)."""
    global _EXIT_HOOKED
    _WATCHERS.add(watcher)
    if not getattr(sys.excepthook, "_workbench", False):
        sys.excepthook = _chain(sys.excepthook, lambda kind, e, tb: (e, threading.main_thread()))
    if not getattr(threading.excepthook, "_workbench", False):
        threading.excepthook = _chain(
            threading.excepthook, lambda args: (args.exc_value, args.thread)
        )
    if not _EXIT_HOOKED:  # after weakref.finalize's own exit hook: atexit runs it first
        _EXIT_HOOKED = True
        atexit.register(_exiting)
    with contextlib.suppress(ImportError):
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None and _cell_ran not in shell.events.callbacks["post_run_cell"]:
            shell.events.register("post_run_cell", _cell_ran)


def unwatch(watcher: Watcher) -> None:
    _WATCHERS.discard(watcher)


def exiting() -> bool:
    """Whether the interpreter is exiting (a finalizer runs at exit, not at a collection)."""
    return _EXITING


def _exiting() -> None:
    global _EXITING
    _EXITING = True


def _chain(previous, read):
    """An exception hook that tells the watchers of ``read(*args)``'s exception, then calls
    ``previous``."""

    def hook(*args):
        with contextlib.suppress(Exception):  # the report of the error itself must go on
            _tell(*read(*args))
        previous(*args)

    hook._workbench = True
    return hook


def _cell_ran(result) -> None:
    """IPython's post_run_cell: a cell's unhandled exception (cells run in the main thread)."""
    if result.error_in_exec is not None:
        _tell(result.error_in_exec, threading.main_thread())


def _tell(error: BaseException | None, thread) -> None:
    if error is None:
        return
    for watcher in list(_WATCHERS):
        watcher.uncaught(error, thread)
