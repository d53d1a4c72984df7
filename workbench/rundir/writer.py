"""The one writer of a run directory: its lock and every state file it writes.

A run directory has one writer at a time (``lock.WriterLock``), and every state file is
replaced atomically (``run.write_json``). The summary goes through three states:
``prepared`` (written with the spec, before anything can train), ``running`` (while the
writer holds the lock) and an end (``completed``, ``stopped``, ``failed``), which a
reader also infers when the lock is free but the summary still says ``running``.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backends.record import library_versions
from .lock import WriterLock
from .run import STOP_FILE, RunDir, now, write_json
from .spec import Resume, RunSpec

ABORTED = "interrupted twice: aborted without a final checkpoint"  # a second Ctrl-C's error
# a SIGTERM's error, as the engine writes it ("<type>: <message>" of interrupts.Terminated)
TERMINATED = "Terminated: SIGTERM"
# errors of a run that may have ended during a save (its unfinished checkpoint is removed at
# the end): a full disk, and the signals this process handles (a second Ctrl-C, SIGTERM)
CUT_SHORT = ("disk full", ABORTED, TERMINATED)
RESERVE = ".reserve"  # bytes kept on disk so that the final summary fits when the disk fills
RESERVE_BYTES = 256 * 1024


def create(path: Path, spec: RunSpec, checkpoints: Path | None = None) -> None:
    """Write a new run's summary (``prepared``, naming this process, which is to start it: if
    it dies first, the run reads ``failed``) and then its spec. ``checkpoints``: a directory
    elsewhere (an attached Trainer's ``output_dir``), linked as the run's ``checkpoints``."""
    write_json(
        path / "summary.json",
        {"status": "prepared", "error": None, "created": now(), **this_process()},
    )
    if checkpoints is not None:
        target = Path(checkpoints).absolute()
        (path / "checkpoints").symlink_to(target, target_is_directory=True)
    write_json(path / "spec.json", spec.to_dict())


def hand_over(run: RunDir) -> None:
    """A prepared run this process will not start (``wb.launch_command``: torchrun starts it,
    elsewhere, later): its summary names no process, so it reads ``prepared`` until claimed."""
    summary = {k: v for k, v in run.summary.items() if k not in ("pid", "host", "pid_started")}
    write_json(run.path / "summary.json", summary)
    run.refresh()


def this_process() -> dict[str, Any]:
    """The summary's fields that name this process (its start time tells a reused pid apart)."""
    import psutil

    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "pid_started": psutil.Process().create_time(),
    }


@dataclass(frozen=True)
class Resumption:
    """What a resume found before it wrote (summary, spec, the event log's bytes) and its
    entry in the spec's ``resumes`` list: a resume that fails before a step puts them back."""

    summary: dict[str, Any]
    spec: RunSpec
    events: bytes
    entry: Resume
    step: int


PF_EXITING = 0x4  # Linux's task flag (include/linux/sched.h), set as a process starts to exit


def gone(process: dict[str, Any]) -> bool:
    """Whether the process that ``this_process()`` described has ended: on this host, its pid
    is free, reused, a zombie, or exiting (a SIGKILLed process closes its sockets before it is
    a zombie; Linux sets ``PF_EXITING`` in ``/proc/<pid>/stat`` first). False on another host."""
    import psutil

    if process.get("host") != socket.gethostname():
        return False
    try:
        proc = psutil.Process(process["pid"])
        if abs(proc.create_time() - float(process.get("pid_started") or 0)) >= 1.0:
            return True  # the pid was freed and taken again
        if proc.status() == psutil.STATUS_ZOMBIE:
            return True
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
        return bool(int(stat.rsplit(")", 1)[1].split()[6]) & PF_EXITING)  # after "(comm)"
    except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
        return True
    except (psutil.Error, OSError, LookupError, TypeError, ValueError):  # unreadable: unknown
        return False


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

    def respec(self, spec: RunSpec) -> None:
        """Replace the run's spec (a resume with new arguments)."""
        write_json(self.run.path / "spec.json", spec.to_dict())
        self.run.refresh()

    def put_back(self, summary: dict[str, Any], spec: RunSpec) -> None:
        """Write back the summary and spec a failed resume found (the reserve makes room);
        a spec the resume did not replace is left alone."""
        (self.run.path / RESERVE).unlink(missing_ok=True)
        self._write(summary)
        if self.run.spec != spec:
            self.respec(spec)

    def take_back(self, before: Resumption, error: str, log) -> OSError | None:
        """A resume that failed before it trained a step: the run as the resume found it, the
        failure in its spec's ``resumes``, the lock released; returns a failed write's error."""
        entry = dataclasses.replace(before.entry, failed=error, ended=now())
        spec = before.spec.resumed(entry)
        failed = None
        try:
            try:
                log.restore(before.events)
                self.put_back(before.summary, spec)
            except OSError as e:
                failed = e
        finally:
            self.release()
        return failed

    def begin(self, info: dict[str, Any]) -> None:
        """The ``running`` summary, and room kept for the final one."""
        reserve = self.run.path / RESERVE
        try:
            with open(reserve, "wb") as f:
                f.write(bytes(RESERVE_BYTES))  # written, not truncated: a sparse file keeps no room
                os.fsync(f.fileno())
        except OSError:
            reserve.unlink(missing_ok=True)  # already full: the next write says so
        previous = {k: v for k, v in self.run.summary.items() if k != "ended"}  # not ended now
        self._write(
            {
                **previous,
                **info,
                "status": "running",
                "error": None,
                **this_process(),
                "started": previous.get("started") or now(),
            }
        )

    def begin_on(self, device, size: int) -> None:
        """``begin`` for a run on ``device`` with ``size`` ranks; resets the device's peak
        memory."""
        device.reset_peak_memory()  # else a second run in this process reports the first one's peak
        self.begin(
            {
                "device": device.to_dict(),
                "max_steps": self.run.spec.args.max_steps,
                "world_size": size,
                "versions": {**library_versions(), **device.versions},
            }
        )

    def end(self, update: dict[str, Any]) -> None:
        """The final summary (on a full disk the reserve makes room for it first). A save cut
        short is removed, else Trainer's rotation would keep it and delete a good one (after a
        SIGKILL, ``discard_after`` does). An end without a step takes the event log's last,
        and the last good checkpoint."""
        (self.run.path / RESERVE).unlink(missing_ok=True)
        if str(update.get("error") or "").startswith(CUT_SHORT):
            for name in self.run.broken_checkpoints:
                shutil.rmtree(self.run.path / "checkpoints" / name, ignore_errors=True)
        summary = {**self.run.summary, **update}
        if summary.get("step") is None:
            summary["step"] = self.run.step  # not ended yet: the events' last step
        if "checkpoint" not in summary:
            last = self.run.last_checkpoint
            summary["checkpoint"] = str(last) if last is not None else None
        self._write({**summary, "ended": now()})

    def discard_after(self, ckpt: Path) -> dict[str, str]:
        """Remove the checkpoint directories newer than ``ckpt``, the one training resumes
        from, whose files do not parse; returns their names with the reason. Trainer's
        rotation deletes the oldest by step without reading them: a broken save past ``ckpt``
        would outlive the good ones. Older broken ones are left: the rotation deletes them."""
        step = int(ckpt.name.split("-")[-1])
        newer = {
            name: why
            for name, why in self.run.broken_checkpoints.items()
            if int(name.split("-")[-1]) > step
        }
        for name in newer:
            shutil.rmtree(self.run.path / "checkpoints" / name, ignore_errors=True)
        return newer

    def finish(self, update: dict[str, Any], log, ended=None) -> OSError | None:
        """End the run whatever fails: the final summary, then ``ended()``, the end event and
        the lock released. Returns the error of a write that failed (the summary on disk then
        says ``running``, which readers of a free lock read as ``failed``)."""
        failed = None
        try:
            try:
                self.end(update)
            except OSError as e:
                failed = e
            if ended is not None:
                ended()
            try:
                log.emit(
                    {"phase": "end", "step": update.get("step", 0), "status": update["status"]}
                )
            except OSError as e:  # the subscribers had it all the same
                failed = failed or e
        finally:
            self.release()
        return failed

    def _write(self, summary: dict[str, Any]) -> None:
        write_json(self.run.path / "summary.json", summary)
        self.run.refresh()


class DiskFull(OSError):
    """A run's disk filled up (errno ENOSPC): the message says where, how much is free, and
    which checkpoint resumes; the error the write raised is its ``__cause__``."""

    def __init__(self, message: str):
        super().__init__(message)
        self.errno = errno.ENOSPC


LOW = 2**20  # bytes free under which a write error is the disk's (torch's writer loses the errno)
_NO_SPACE = ("No space left on device", "os error 28")  # safetensors' error keeps only the text
_WRITE_FAILED = ("iostream error", "file write failed", "unexpected pos", "PytorchStreamWriter")


def _out_of_space(error: BaseException, free: int) -> BaseException | None:
    """The error in ``error``'s chain that says the disk is full; None if none does."""
    chain, e = [], error
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or e.__context__
    for e in chain:
        if (isinstance(e, OSError) and e.errno == errno.ENOSPC) or any(
            m in str(e) for m in _NO_SPACE
        ):
            return e
    if free < LOW:  # a write that failed, without saying why, on a disk with nothing left
        return next(
            (
                e
                for e in chain
                if any(m in str(e) for m in _WRITE_FAILED)
                or (isinstance(e, OSError) and e.errno in (None, errno.EIO))
            ),
            None,
        )
    return None


def disk_full_message(error: BaseException, run: RunDir) -> str | None:
    """For an out-of-space error anywhere in ``error``'s chain: where, how much is free, and
    which checkpoint is the last good one; None for any other error."""
    free = shutil.disk_usage(run.path).free
    e = _out_of_space(error, free)
    if e is None:
        return None
    broken = [run.path / "checkpoints" / name for name in run.broken_checkpoints]
    # the file, else the checkpoint
    where = getattr(e, "filename", None) or (broken[-1] if broken else run.path)
    good = run.last_checkpoint
    last = f"the last good checkpoint is {good.name}" if good else "there is no good checkpoint yet"
    then = f"wb.Run.open({str(run.path)!r}).resume()" if good else "train again"
    return f"disk full at {where}: {free / 2**20:.0f} MB free; {last}. Free some space, then {then}"
