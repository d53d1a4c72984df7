"""A worker's error file is whole or absent when torchrun's agent reads it.

torch elastic's agent parses each failed worker's ``TORCHELASTIC_ERROR_FILE`` as soon as the
worker is gone (``ProcessFailure.__post_init__``); torch's stock handler creates the file and
then writes into it, so a worker stopped in between leaves an empty file and the agent dies in
``json.load`` (seen in a clean-clone run of tests/test_multinode.py). The worker records with
``WholeErrorFile`` instead; an interruption in the middle of the write is simulated here by a
``json.dump`` that writes half a record and is then interrupted, as a signal would.
"""

from __future__ import annotations

import json

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
