"""One writer per run directory: an advisory lock held for the life of the training.

The lock is ``fcntl.flock`` on ``<run>/.lock``. The operating system releases it when the
process that holds it ends, however it ends (SIGKILL, power loss), so a run is training
exactly while its lock is held: readers ask the lock, not a pid that may have been reused.
flock locks belong to an open file, so a second claim from the same process fails too.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

LOCK_FILE = ".lock"


class RunBusy(RuntimeError):
    """Another process (or this one) is writing the run directory."""


class WriterLock:
    """The write lock of run directory ``path``: ``claim()`` it before writing, ``release()``
    after."""

    def __init__(self, path: str | Path):
        self.path = Path(path) / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def claim(self, action: str = "train") -> WriterLock:
        """Take the lock, or raise RunBusy naming the process that holds it."""
        if self._fd is not None:
            return self
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise RunBusy(
                f"cannot {action} {self.path.parent.name}: it is being trained by {holder}. "
                f"Stop it first (wb.Run.open(path).stop() works from any process) or wait "
                f"for it to end."
            ) from None
        self._fd = fd
        try:  # who holds it, for the refusal above: on a full disk it stays unsaid
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
        except OSError:
            pass
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def busy(self) -> bool:
        """Whether some process (this one included, through another object) holds the lock."""
        if self._fd is not None:
            return True
        if not self.path.exists():
            return False
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)
