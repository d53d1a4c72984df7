"""The runs under a Jupyter server's root directory, as the side panel lists them.

Run directories are ``<dir>/<runs>/<run>/spec.json``, ``<dir>`` the root or a folder up to
``DEPTH`` levels below it, ``<runs>`` any folder that holds a run. The folders found by walking
the tree are kept for ``RESCAN_S`` seconds; the runs inside them are listed on every poll, and
each event log read incrementally (``EventTail``). Nothing here writes a run but a STOP file.
"""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path, PurePosixPath
from typing import Any

from ..rundir.lock import LOCK_FILE
from ..rundir.run import RunDir, model_name
from .tail import EventTail

DEPTH = 3
RESCAN_S = 10.0
SKIP = {"node_modules", ".venv", "venv", "site-packages", "__pycache__"}  # and every hidden folder


class BadPath(ValueError):
    """No usable path was given (HTTP 400)."""


class NotFound(LookupError):
    """No run directory at that path under the root (HTTP 404)."""


class NotRunning(RuntimeError):
    """The run is not training, so there is nothing to stop (HTTP 409)."""


def _folders(path: Path) -> list[Path]:
    """The sub-folders of ``path`` worth looking into (no hidden ones, no symlinks: never out of
    the root)."""
    try:
        with os.scandir(path) as it:
            return [
                Path(e.path)
                for e in it
                if e.is_dir(follow_symlinks=False)
                and not e.name.startswith(".")
                and e.name not in SKIP
            ]
    except OSError:  # vanished, or not readable
        return []


def _holds_runs(folder: Path) -> bool:
    """Whether a sub-folder of ``folder`` is a run directory (has a ``spec.json``)."""
    return any((sub / "spec.json").is_file() for sub in _folders(folder))


def find_runs_folders(root: Path, depth: int = DEPTH) -> list[Path]:
    """Every folder of runs in ``root`` or in a folder at most ``depth`` levels below it: one
    named ``runs``, or one with a run directory in it, whatever its name."""
    found, level = [], [root]
    for d in range(depth + 1):
        below = []
        for folder in level:
            for sub in _folders(folder):
                if sub.name == "runs" or _holds_runs(sub):
                    found.append(sub)  # its children are runs: not searched further
                elif d < depth:
                    below.append(sub)
        level = below
    return sorted(found)


class RunTable:
    """The runs under ``root``: rows for the list, one run's detail, stop requests.

    Parameters
    ----------
    root : str or Path
        The Jupyter server's root directory; no path outside it is ever read.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self._folders: list[Path] = []
        self._scanned = -float("inf")
        self._runs: dict[Path, tuple[RunDir, EventTail]] = {}

    # ----------------------------------------------------------------- finding
    def folders(self) -> list[Path]:
        """The ``runs`` folders, found again at most every ``RESCAN_S`` seconds."""
        if time.monotonic() - self._scanned >= RESCAN_S:
            self._folders = find_runs_folders(self.root)
            self._scanned = time.monotonic()
        return self._folders

    def _run_dirs(self) -> list[Path]:
        found = []
        for folder in self.folders():
            found += [p for p in _folders(folder) if (p / "spec.json").is_file()]
        return found

    def _open(self, path: Path) -> tuple[RunDir, EventTail]:
        if path not in self._runs:
            self._runs[path] = (RunDir(path), EventTail(path / "events.jsonl"))
        run, tail = self._runs[path]
        tail.poll()
        return run, tail

    def resolve(self, rel: Any) -> Path:
        """The run directory at ``rel`` (relative to the root); NotFound for anything that
        is not a run directory inside the root (``..``, absolute paths, symlinks out)."""
        if not isinstance(rel, str) or not rel.strip():
            raise BadPath(
                "give 'path': a run directory relative to the server's root, as workbench/runs "
                "lists it"
            )
        if PurePosixPath(rel).is_absolute() or os.path.isabs(rel):
            raise NotFound(
                f"{rel!r} is an absolute path; give the run's path relative to the server's root, "
                f"as workbench/runs lists it"
            )
        full = (self.root / rel).resolve()
        if full != self.root and self.root not in full.parents:
            raise NotFound(
                f"{rel!r} is outside the server's root; give a run's path as workbench/runs lists "
                "it"
            )
        if not (full / "spec.json").is_file():
            raise NotFound(
                f"no run directory at {rel!r} (no spec.json there); workbench/runs lists the runs"
            )
        return full

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    # ----------------------------------------------------------------- reading
    def rows(self) -> list[dict[str, Any]]:
        """One row per run, newest first (run directory names start with a timestamp)."""
        paths = self._run_dirs()
        for gone in set(self._runs) - set(paths):
            del self._runs[gone]
        return [self.row(p) for p in sorted(paths, key=lambda p: (p.name, str(p)), reverse=True)]

    def row(self, path: Path) -> dict[str, Any]:
        """The list's row for the run directory ``path``."""
        run, tail = self._open(path)
        row: dict[str, Any] = {
            "path": self.relative(path),
            "name": path.name,
            "status": "failed",
            "step": tail.step or 0,
            "max_steps": tail.max_steps,
            "loss": tail.loss,
            "loss_series": tail.loss_series(),
            "tokens_per_s": tail.tokens_per_s,
            "samples_per_s": tail.samples_per_s,
            "device": tail.device,
            "mem_alloc": tail.mem_alloc,
            "mem_total": tail.mem_total,
            "eta_s": None,
            "error": None,
            "model": None,
            "data": None,
            "updated": tail.mtime,
        }
        try:
            summary, spec, status = run.summary, run.spec, run.status
        except (OSError, ValueError) as e:  # a spec or summary that does not parse
            row["error"] = f"unreadable run directory: {e}"
            return row
        step = int(summary.get("step") or 0)
        row.update(
            {
                "status": status,
                "step": step if summary.get("ended") else max(step, tail.step or 0),
                "max_steps": tail.max_steps or summary.get("max_steps") or spec.args.max_steps,
                "device": tail.device or (summary.get("device") or {}).get("kind"),
                "error": summary.get("error"),
                "model": model_name(spec.model),
                "data": spec.data.get("source"),
            }
        )
        if status == "running":
            row["eta_s"] = tail.eta_s(row["max_steps"])
        elif summary.get("tokens_per_s") or summary.get("samples_per_s"):
            # an ended run's throughput is the one it reports (after warm-up), not its last
            # interval's, which may have been a step or two after an evaluation
            row["tokens_per_s"] = summary.get("tokens_per_s")
            row["samples_per_s"] = summary.get("samples_per_s")
        return row

    def by_writer(self, pids: set[int]) -> dict[int, dict[str, Any]]:
        """pid -> the row of the run each of ``pids`` (live processes) writes or last wrote
        (its lock file names the pid, on this host; the lock file stays after the run ends):
        which run a card's holder trains, at which step. A running run first, else the newest."""
        out: dict[int, dict[str, Any]] = {}
        host = socket.gethostname()
        for path in self._run_dirs():
            try:
                said = (path / LOCK_FILE).read_text(errors="replace").strip()
            except OSError:
                continue
            found = re.fullmatch(r"pid (\d+) on (.+)", said)
            if not found or found[2] != host or int(found[1]) not in pids:
                continue
            row = {**self.row(path), "full_path": str(path)}
            best = out.get(int(found[1]))
            rank = (row["status"] == "running", row["updated"] or 0)
            if best is None or rank > (best["status"] == "running", best["updated"] or 0):
                out[int(found[1])] = row
        return out

    def memory_by_writer(self) -> dict[int, tuple[int, int | None]]:
        """pid -> (device memory in use, total) as the last events of each running run log
        them, keyed by the pid its lock file names when that is a process of this host: the
        allocator's figures (``memory_stats``), which only the process holding a card reads."""
        out: dict[int, tuple[int, int | None]] = {}
        host = socket.gethostname()
        for path in self._run_dirs():
            run, tail = self._open(path)
            try:
                if run.status != "running" or tail.mem_alloc is None:
                    continue
                said = (path / LOCK_FILE).read_text(errors="replace").strip()
            except (OSError, ValueError):
                continue
            found = re.fullmatch(r"pid (\d+) on (.+)", said)
            if found and found[2] == host:
                out[int(found[1])] = (int(tail.mem_alloc), tail.mem_total)
        return out

    def saved(self, full: Any) -> dict[str, Any]:
        """The saved output of the run at the absolute path ``full`` (what a live dashboard's
        output names) once it has ended, else None; NotFound outside the root."""
        from ..views.dashboard import saved_run_output

        if not isinstance(full, str) or not os.path.isabs(full):
            raise BadPath(
                "give 'path': the run directory's absolute path, as the dashboard's output names it"
            )
        try:
            rel = Path(full).resolve().relative_to(self.root).as_posix()
        except ValueError:
            raise NotFound(f"{full!r} is outside the server's root") from None
        path = self.resolve(rel)
        run = RunDir(path)
        status = run.status
        output = None if status in ("running", "prepared") else saved_run_output(run)
        return {"path": self.relative(path), "status": status, "output": output}

    def detail(self, rel: Any) -> dict[str, Any]:
        """One run: summary, spec, the last events, its checkpoints, its latest sample grid."""
        path = self.resolve(rel)
        run, tail = self._open(path)
        return {
            "path": self.relative(path),
            "name": path.name,
            "status": run.status,
            "summary": run.summary,
            "spec": run.spec.to_dict(),
            "events": list(tail.recent),
            "checkpoints": [p.name for p in run.checkpoints],
            "samples": tail.samples,
        }

    # ----------------------------------------------------------------- stopping
    def stop(self, rel: Any) -> dict[str, Any]:
        """Ask a running run to stop after its current step (its STOP file); NotRunning
        otherwise."""
        path = self.resolve(rel)
        run, _tail = self._open(path)
        status = run.status
        if status != "running":
            raise NotRunning(
                f"run {self.relative(path)!r} is {status}, not running: there is nothing to stop"
            )
        run.stop()
        return {"path": self.relative(path), "status": run.status, "stopping": True}
