"""Hold records: which cards each user's processes hold, told to the node's other users.

Linux shows a process's open files to its owner and root only, so each user's processes leave
a record of their own holds, one file per holding process, in a folder every user may write
(``WORKBENCH_HOLDS``, default ``/tmp/workbench-holds``, mode 1777). A record is untrusted data:
its user is the file's owner (never its text), and a reader keeps it only while the process it
names is alive, owned by that user, and started when the record says (``/proc/<pid>/stat``).
Its cards are device-file paths, only compared with the reader's cards, never opened.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from .. import settings

DEFAULT = "/tmp/workbench-holds"
_MAX_BYTES = 64 * 1024  # a record names a few cards; anything longer is not one


def folder() -> Path:
    """Where hold records are kept: ``$WORKBENCH_HOLDS``, else ``/tmp/workbench-holds``."""
    return Path(settings.get(settings.HOLDS) or DEFAULT)


def started(pid: int, proc: Path) -> int | None:
    """When process ``pid`` started (clock ticks after boot, ``/proc/<pid>/stat`` field 22,
    readable by every user); None once it is gone, or has exited and not been reaped yet."""
    try:
        after_name = (proc / str(pid) / "stat").read_bytes().rsplit(b")", 1)[1].split()
        return None if after_name[0] == b"Z" else int(after_name[19])
    except (OSError, IndexError, ValueError):
        return None


def _open(create: bool) -> int | None:
    """The records' folder, opened without following a link (its path is in a folder others
    write); made with mode 1777 when ``create``. None where it cannot be."""
    path = folder()
    if create and not path.is_dir():
        try:
            path.mkdir(mode=0o700, parents=True)
            path.chmod(0o1777)  # every user writes here; only a file's owner removes it
        except OSError:
            pass
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None


def _records(fd: int) -> dict[str, tuple[int, dict]]:
    """File name -> (its owner's uid, its record), for every readable record in folder ``fd``."""
    out: dict[str, tuple[int, dict]] = {}
    for name in os.listdir(fd):
        if not (name.endswith(".json") and name[:-5].isdigit()):
            continue
        try:
            f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
        except OSError:
            continue
        try:
            st = os.fstat(f)
            if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_BYTES:
                continue
            record = json.loads(os.read(f, _MAX_BYTES))
        except (OSError, ValueError):
            continue
        finally:
            os.close(f)
        if isinstance(record, dict) and _whole(record.get("pid")) == int(name[:-5]):
            out[name] = (st.st_uid, record)
    return out


def _whole(value: object) -> int | None:
    """``value`` where it is a whole number (JSON's ``true`` is not one), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _cards(record: dict) -> list[str]:
    """The device files a record names (nothing, where it names them wrongly)."""
    cards = record.get("cards")
    if not isinstance(cards, list) or not all(isinstance(c, str) for c in cards):
        return []
    return cards


def _alive(uid: int, record: dict, proc: Path) -> bool:
    """Whether the record's process runs now, as ``uid``, since the time the record says."""
    pid, start = _whole(record.get("pid")), _whole(record.get("start"))
    if pid is None or start is None:
        return False
    try:
        owner = (proc / str(pid)).stat().st_uid
    except OSError:
        return False
    return owner == uid and started(pid, proc) == start


def exchange(held: dict[int, list[str]], looked_at: set[str], proc: Path) -> dict[str, list[int]]:
    """Tell and hear, in one reading of the folder: record the holds of this user's processes
    in ``held`` (pid -> device files), remove this user's stale records, and return, for each
    card of ``looked_at``, the pids other users' live records say hold it."""
    me, found = os.getuid(), {}
    fd = _open(create=bool(held))
    if fd is None:
        return {}
    try:
        for name, (uid, record) in _records(fd).items():
            alive = _alive(uid, record, proc)
            if uid != me:
                for card in set(_cards(record)) & looked_at if alive else ():
                    found.setdefault(card, []).append(record["pid"])
            elif record["pid"] not in held and (not alive or set(_cards(record)) <= looked_at):
                try:
                    os.unlink(name, dir_fd=fd)
                except OSError:
                    pass
        for pid, cards in held.items():
            _write(fd, {"pid": pid, "start": started(pid, proc), "cards": sorted(cards)})
        return found
    finally:
        os.close(fd)


def _write(fd: int, record: dict) -> None:
    """``record`` as ``<pid>.json`` in folder ``fd``, replaced whole (a reader never sees half
    of one), readable by every user; unchanged records are left alone."""
    name, text = f"{record['pid']}.json", json.dumps(record)
    try:  # never blocking on a FIFO someone put there, nor reading more than a record
        f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
        try:
            if os.read(f, _MAX_BYTES) == text.encode():
                return
        finally:
            os.close(f)
    except OSError:
        pass
    # a fresh file of this user's (O_EXCL), then one rename: a name another user put there
    # (even a link) is replaced, never followed
    tmp = f".{record['pid']}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        f = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
        os.fchmod(f, 0o644)  # whatever the umask: every user reads it
        with open(f, "w") as out:
            out.write(text)
        os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except OSError:
        try:
            os.unlink(tmp, dir_fd=fd)
        except OSError:
            pass
