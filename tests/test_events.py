"""The one reader of a run's ``events.jsonl`` (``rundir.events``): whole lines, as they come."""

from __future__ import annotations

import json
import os

from workbench.rundir.events import EventReader, read_events
from workbench.rundir.run import EventLog


def _line(event: dict) -> bytes:
    return (json.dumps(event, sort_keys=True) + "\n").encode()


def test_a_reader_returns_each_whole_event_once_and_waits_for_a_partial_line(tmp_path):
    path = tmp_path / "events.jsonl"
    reader = EventReader(path)
    assert reader.read() == ([], False) and reader.mtime is None
    log = EventLog(path)
    log.emit({"step": 1})
    log.emit({"step": 2})
    assert reader.read() == ([{"step": 1}, {"step": 2}], False) and reader.mtime is not None
    assert reader.read() == ([], False)
    with open(path, "ab") as f:  # the writer is mid-line: nothing yet
        f.write(b'{"step": ')
    assert reader.read() == ([], False)
    with open(path, "ab") as f:
        f.write(b'3}\n{"step": 4')  # a line cut short by a kill, then appended to
        f.write(b"\n" + _line({"step": 5}))
    assert reader.read() == ([{"step": 3}, {"step": 5}], False)


def test_a_replaced_shortened_or_removed_log_is_read_again_from_its_start(tmp_path):
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    for step in (1, 2, 3):
        log.emit({"step": step})
    reader = EventReader(path)
    assert [e["step"] for e in reader.read()[0]] == [1, 2, 3]
    log.truncate_after(2)  # a resume: a new file
    assert reader.read() == ([{"step": 1}, {"step": 2}], True)
    os.truncate(path, len(_line({"step": 1})))  # shortened in place
    assert reader.read() == ([{"step": 1}], True)
    path.unlink()
    assert reader.read() == ([], True) and reader.mtime is None
    assert reader.read() == ([], False)
    log.emit({"step": 9})
    assert reader.read() == ([{"step": 9}], False)


def test_the_whole_log_includes_a_last_line_without_its_newline(tmp_path):
    path = tmp_path / "events.jsonl"
    assert read_events(path) == [] and EventLog(path).read() == []
    path.write_bytes(_line({"step": 1}) + b'{"cut": ' + b"\n" + b'{"step": 2}')
    assert read_events(path) == [{"step": 1}, {"step": 2}] == EventLog(path).read()
