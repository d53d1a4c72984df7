"""The one reader of a run's ``events.jsonl``: whole or as it grows.

A reader may meet a line not finished yet (it waits for the next read), a line cut short by
a kill and then appended to (skipped), and a log replaced by a resume (a new inode) or
shortened: then it reads the new file from its start and says so.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


class EventReader:
    """Reads ``path`` as it is appended to; each ``read`` returns the events added since the
    last one.

    Attributes
    ----------
    mtime : float or None
        When the log last changed (unix seconds), as of the last read; None while there is none.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._inode: int | None = None
        self._offset = 0
        self._partial = b""
        self.mtime: float | None = None

    def _start_over(self, inode: int | None) -> bool:
        """Forget what was read; True when something had been (the log was replaced)."""
        had = self._inode is not None
        self._inode, self._offset, self._partial, self.mtime = inode, 0, b"", None
        return had

    def read(self, *, final: bool = False) -> tuple[list[dict], bool]:
        """(the events appended since the last read, whether the log was replaced, shortened or
        removed: then the new file's from its start); ``final`` also reads a last line
        without its newline."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return [], self._start_over(None)
        started_over = False
        if st.st_ino == self._inode and st.st_size == self._offset and not final:
            self.mtime = st.st_mtime
            return [], False
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())  # the file opened, should it have been replaced
                if st.st_ino != self._inode or st.st_size < self._offset:
                    started_over = self._start_over(st.st_ino)
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return [], self._start_over(None)
        self.mtime = st.st_mtime
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = b"" if final else lines.pop()  # no newline yet: the writer is mid-line
        events = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:  # a line cut short by a kill (or, final, an empty last one)
                continue
            if isinstance(event, dict):
                events.append(event)
        return events, started_over


def read_events(path: str | Path) -> list[dict]:
    """Every whole event of the log at ``path`` ([] when there is none)."""
    return EventReader(path).read(final=True)[0]
