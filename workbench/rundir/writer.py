"""The one writer of a run directory: its lock and every state file it writes.

A run directory has one writer at a time (``lock.WriterLock``), and every state file is
replaced atomically (``run.write_json``). The summary goes through three states:
``prepared`` (written with the spec, before anything can train), ``running`` (while the
writer holds the lock) and an end (``completed``, ``stopped``, ``failed``), which a
reader also infers when the lock is free but the summary still says ``running``.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
from pathlib import Path
from typing import Any

from ..backends.record import library_versions
from .lock import WriterLock
from .run import STOP_FILE, RunDir, now, write_json

RESERVE = ".reserve"  # bytes kept on disk so that the final summary fits when the disk fills
RESERVE_BYTES = 256 * 1024


def create(path: Path, spec: dict[str, Any]) -> None:
    """Write a new run's summary (``prepared``) and then its spec: a run directory is never
    seen without a summary, so a process killed in between leaves no ``running`` run."""
    write_json(path / "summary.json", {"status": "prepared", "error": None, "created": now()})
    write_json(path / "spec.json", spec)


class RunWriter:
    """Holds a run's lock while it trains, and writes its summary and spec."""

    def __init__(self, run: RunDir):
        self.run = run
        self.lock = WriterLock(run.path)

    def claim(self, action: str = "train") -> RunWriter:
        """Take the run's lock (RunBusy names the holder) and clear a stale STOP request."""
        self.lock.claim(action)
        (self.run.path / STOP_FILE).unlink(missing_ok=True)
        return self

    def release(self) -> None:
        (self.run.path / RESERVE).unlink(missing_ok=True)
        self.lock.release()

    def respec(self, spec: dict[str, Any]) -> None:
        """Replace the run's spec (a resume with new arguments)."""
        write_json(self.run.path / "spec.json", spec)
        self.run.refresh()

    def begin(self, info: dict[str, Any]) -> None:
        """The ``running`` summary, and room kept for the final one."""
        import psutil

        reserve = self.run.path / RESERVE
        try:
            with open(reserve, "wb") as f:
                f.truncate(RESERVE_BYTES)
                os.fsync(f.fileno())
        except OSError:
            reserve.unlink(missing_ok=True)  # already full: the checkpoint save will say so
        previous = self.run.summary
        self._write({**previous, **info, "status": "running", "error": None, "pid": os.getpid(),
                     "host": socket.gethostname(), "pid_started": psutil.Process().create_time(),
                     "started": previous.get("started") or now()})

    def begin_on(self, device, size: int) -> None:
        """``begin`` for a run on ``device`` with ``size`` ranks; resets the device's peak memory."""
        device.reset_peak_memory()  # else a second run in this process reports the first one's peak
        self.begin({"device": device.to_dict(), "max_steps": self.run.spec["args"]["max_steps"],
                    "world_size": size, "versions": {**library_versions(), **device.versions}})

    def end(self, update: dict[str, Any]) -> None:
        """The final summary. On a full disk the reserve makes room for it first, and the
        checkpoint the save could not finish is removed (the earlier ones stay resumable)."""
        (self.run.path / RESERVE).unlink(missing_ok=True)
        if str(update.get("error") or "").startswith("disk full"):
            for name in self.run.broken_checkpoints:
                shutil.rmtree(self.run.path / "checkpoints" / name, ignore_errors=True)
        self._write({**self.run.summary, **update, "ended": now()})

    def _write(self, summary: dict[str, Any]) -> None:
        write_json(self.run.path / "summary.json", summary)
        self.run.refresh()


def disk_full_message(error: BaseException, run: RunDir) -> str | None:
    """For an out-of-space error anywhere in ``error``'s chain: where, how much is free, and
    which checkpoint is the last good one; None for any other error."""
    e: BaseException | None = error
    while e is not None and not (isinstance(e, OSError) and e.errno == errno.ENOSPC):
        e = e.__cause__ or e.__context__
    if e is None:
        return None
    free = shutil.disk_usage(run.path).free
    where = getattr(e, "filename", None) or run.path
    good = run.last_checkpoint
    last = f"the last good checkpoint is {good.name}" if good else "there is no good checkpoint yet"
    return (f"disk full at {where}: {free / 2**20:.0f} MB free; {last}. Free some space, then "
            f"wb.Run.open({str(run.path)!r}).resume()")
