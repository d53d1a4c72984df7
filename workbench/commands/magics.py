"""``%load_ext workbench`` registers the ``%wb`` line magic.

%wb device              the device card
%wb runs                every run under ./runs
%wb stop                stop the run training in this kernel (after the current step)
%wb compare RUN RUN...  runs side by side (directory names or paths)
"""

from __future__ import annotations

import shlex
from pathlib import Path

USAGE = "usage: %wb device | runs | stop | compare RUN [RUN ...]"


def _resolve(name: str):
    from ..settings import runs_root
    from ..training.engine import Run

    path = Path(name)
    if not (path / "spec.json").exists():
        path = runs_root() / name
    return Run.open(path)


def wb_magic(line: str):
    """Dispatch ``%wb SUBCOMMAND ...``; returns what the cell should display."""
    from ..backends.registry import device
    from ..rundir.run import compare, runs
    from ..training.engine import active

    args = shlex.split(line)
    if not args:
        raise ValueError(USAGE)
    cmd, rest = args[0], args[1:]
    if cmd == "device":
        return device()
    if cmd == "runs":
        return runs()
    if cmd == "stop":
        run = active()
        if run is None:
            print("no run is training in this kernel")
            return None
        run.stop()
        print(f"stopping {run.name} after the current step")
        return None
    if cmd == "compare":
        if not rest:
            raise ValueError("usage: %wb compare RUN [RUN ...] (run directory names or paths)")
        return compare(*[_resolve(r) for r in rest])
    raise ValueError(f"unknown %wb command {cmd!r}; {USAGE}")


def load_ipython_extension(ipython) -> None:
    ipython.register_magic_function(wb_magic, magic_kind="line", magic_name="wb")
