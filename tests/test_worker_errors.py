"""How a worker ends: its error file whole or absent when torchrun's agent reads it, and a
worker that trained leaving with its exit hooks run and its output flushed (``leave``).

torch elastic's agent parses each failed worker's ``TORCHELASTIC_ERROR_FILE`` as soon as the
worker is gone (``ProcessFailure.__post_init__``); torch's stock handler creates the file and
then writes into it, so a worker stopped in between leaves an empty file and the agent dies in
``json.load`` (seen in a clean-clone run of tests/test_multinode.py). The worker records with
``WholeErrorFile`` instead; an interruption in the middle of the write is simulated here by a
``json.dump`` that writes half a record and is then interrupted, as a signal would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from torch.distributed.elastic.multiprocessing.errors import ErrorHandler, ProcessFailure
from torch.distributed.elastic.multiprocessing.errors import error_handler as torch_handler

from workbench.scaleout.worker import WholeErrorFile


class Stopped(BaseException):
    """What the agent's SIGTERM becomes in the worker, arriving in the middle of the write."""


def _half_written(data, fp):
    fp.write(json.dumps(data)[:10])
    fp.flush()
    raise Stopped


def _record(handler: ErrorHandler) -> None:
    try:
        raise ValueError("rank 1 was told to stop")
    except ValueError as e:
        handler.record_exception(e)


@pytest.mark.parametrize("handler, leaves_a_broken_file", [(ErrorHandler(), True), (WholeErrorFile(), False)],
                         ids=["torch's own", "WholeErrorFile"])
def test_an_interrupted_write_leaves_no_half_file(tmp_path, monkeypatch, handler, leaves_a_broken_file):
    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    monkeypatch.setattr(torch_handler.json, "dump", _half_written)
    with pytest.raises(Stopped):
        _record(handler)
    # torch's own handler shows the failure this guards against; the worker's leaves nothing
    assert error_file.exists() is leaves_a_broken_file
    assert [p.name for p in tmp_path.iterdir()] == (["error.json"] if leaves_a_broken_file else [])
    if not leaves_a_broken_file:
        failure = ProcessFailure(local_rank=1, pid=1, exitcode=-15, error_file=str(error_file))
        assert "Signal 15" in failure.message  # the agent reports the signal instead of dying


def test_a_whole_record_is_what_the_agent_reads(tmp_path, monkeypatch):
    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    _record(WholeErrorFile())
    assert [p.name for p in tmp_path.iterdir()] == ["error.json"]
    failure = ProcessFailure(local_rank=1, pid=1, exitcode=1, error_file=str(error_file))
    assert failure.message["message"] == "ValueError: rank 1 was told to stop"
    assert "raise ValueError" in failure.message["extraInfo"]["py_callstack"]


def test_without_an_error_file_the_record_is_only_logged(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    _record(WholeErrorFile())
    assert list(tmp_path.iterdir()) == []


def test_the_rank_that_raised_is_named_when_its_peer_reports_in_the_same_second(tmp_path, monkeypatch):
    """rank 1 raises; rank 0 then fails on the closed connection and torchrun SIGTERMs it as it
    exits. Both error files carry the same whole-second timestamp (seen in CI: "rank 0 failed
    (exit code -15): ... Connection closed by peer"): the file written first names the cause."""
    from types import SimpleNamespace

    from workbench.scaleout.launcher import _failure

    attempt = tmp_path / "logs" / "abc" / "attempt_0"
    for rank, message in ((1, "boom on rank 1"), (0, "Connection closed by peer")):
        (attempt / str(rank)).mkdir(parents=True)
        monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(attempt / str(rank) / "error.json"))
        try:
            raise RuntimeError(message)
        except RuntimeError as e:
            WholeErrorFile().record_exception(e)
    records = {r: json.loads((attempt / str(r) / "error.json").read_text()) for r in (0, 1)}
    for r, record in records.items():  # the same second in both, as torch writes it
        record["message"]["extraInfo"]["timestamp"] = "1796000000"
        (attempt / str(r) / "error.json").write_text(json.dumps(record))
    os.utime(attempt / "1" / "error.json", ns=(1_796_000_000_100_000_000,) * 2)
    os.utime(attempt / "0" / "error.json", ns=(1_796_000_000_300_000_000,) * 2)
    log = ("  rank      : 0 (local_rank: 0)\n  exitcode  : -15 (pid: 11)\n"
           "  rank      : 1 (local_rank: 1)\n  exitcode  : 1 (pid: 12)\n")
    rank, message = _failure(SimpleNamespace(path=tmp_path), log)
    assert rank == 1
    assert message == "rank 1 failed (exit code 1): RuntimeError: boom on rank 1"


@pytest.mark.parametrize("record", [{"message": {"extraInfo": {"timestamp": "1"}}},
                                    {"message": {"message": None}}, {"message": "Signal 9"}, []],
                         ids=["no message", "message null", "a string", "a list"])
def test_an_error_file_without_a_message_is_passed_over(tmp_path, record):
    """torch elastic writes ``{"message": {"message": "Type: text", "extraInfo": ...}}``; a file
    of another shape (another handler's, a user's) named no cause: the launcher used to fail
    on it with a ``KeyError`` instead of reporting the rank's exit code."""
    from types import SimpleNamespace

    from workbench.scaleout.launcher import _failure

    (tmp_path / "logs" / "abc" / "attempt_0" / "1").mkdir(parents=True)
    (tmp_path / "logs" / "abc" / "attempt_0" / "1" / "error.json").write_text(json.dumps(record))
    log = "  rank      : 1 (local_rank: 1)\n  exitcode  : 1 (pid: 12)\n"
    assert _failure(SimpleNamespace(path=tmp_path), log) == (1, "rank 1 failed (exit code 1)")


def test_leave_runs_the_exit_hooks_flushes_and_keeps_the_exit_code(tmp_path):
    """``leave`` skips the interpreter's finalization (torch's exit race lies there) and
    nothing else a finishing worker relies on: atexit's hooks, ``weakref.finalize``'s, the
    buffered standard streams (a pipe: block-buffered, as torchrun's log redirection is)."""
    script = (
        "import atexit, sys, weakref\n"
        "class Held: pass\n"
        "held = Held()\n"
        "weakref.finalize(held, print, 'finalizer ran')\n"
        "atexit.register(print, 'exit hook ran')\n"
        "print('trained', end='')\n"
        "sys.stderr.write('warned')\n"
        "from workbench.scaleout.worker import leave\n"
        "leave(3)\n"
        "print('never')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith("trained"), done.stdout
    assert "exit hook ran" in done.stdout and "finalizer ran" in done.stdout, done.stdout
    assert "never" not in done.stdout
    assert done.stderr.endswith("warned"), done.stderr
