"""wb.profile: a trace and a non-empty top-ops table from real training steps."""

from __future__ import annotations

import json
import os

import pytest

import workbench as wb
from workbench.liblogs import native_stderr_without


@pytest.mark.slow
def test_profile_writes_a_trace_and_a_top_ops_table(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    prof = wb.profile("gpt2-tiny", wb.dataset("docstrings-lm", limit=64), steps=3, warmup=2,
                      batch_size=4, max_length=32)
    assert prof.run.status == "completed" and prof.run.summary["step"] == 5
    trace = json.loads(prof.trace.read_text())
    assert trace["traceEvents"], "the Chrome/Perfetto trace has events"
    assert list(prof.tensorboard.glob("*.pt.trace.json")), "TensorBoard profile files are written"
    table = prof.table
    assert len(table) > 0 and {"op", "self_ms", "calls", "input_shapes"} <= set(table.columns)
    assert (table["self_ms"] >= 0).all() and table["self_ms"].is_monotonic_decreasing
    assert any(op.startswith("aten::") for op in table["op"])
    assert "<table" in prof._repr_html_()
    err = capfd.readouterr().err  # the profiler's own start/stop lines, printed by C++, held back
    assert "SyncActivityProfilerHandler" not in err and "Memory block of unknown size" not in err, err


def test_held_back_native_stderr_keeps_all_but_the_noise(capfd):
    with native_stderr_without(lambda line: line.startswith("USDT:")):
        os.write(2, b"USDT: profiler_start\n[W] a real warning\n")
        assert capfd.readouterr().err == "", "held back while the block runs"
    assert capfd.readouterr().err == "[W] a real warning\n"
