"""The dashboard's traits and messages, without a browser; static output under papermill."""

from __future__ import annotations

import base64
import json
import time

import nbformat
import numpy as np
import papermill
import pytest

from workbench import dashboard as dash
from workbench.dashboard import Dashboard, RecordingFrontend
from workbench.engine import Run
from workbench.run import write_json


@pytest.fixture
def run(tmp_path):
    path = tmp_path / "20260101-000000-test"
    path.mkdir()
    write_json(path / "spec.json", {"model": {"task": "causal_lm", "family": "gpt2", "size": "tiny"},
                                    "data": {"source": "docstrings-lm"},
                                    "args": {"throughput_warmup_steps": 3}})
    write_json(path / "summary.json", {"status": "completed", "step": 0})
    return Run(path)


def _event(step, phase="train"):
    return {"step": step, "phase": phase, "loss": 5.0 / step, "lr": 1e-3, "samples_per_s": 100.0,
            "tokens_per_s": 4000.0 + step, "mem_alloc": 1e6, "mem_peak": 2e6, "compiles": None,
            "time": step * 0.01}


def _rows(delta):
    content, buffers = delta
    values = np.frombuffer(buffers[0], dtype=np.float32).reshape(content["n"], len(content["fields"]))
    return {f: values[:, i].tolist() for i, f in enumerate(content["fields"])}


def _live(run):
    front = RecordingFrontend()
    d = Dashboard(run, mode="live", sink=front)
    d({"phase": "start", "max_steps": 100, "mem_total": 8e9, "device": "cpu"})
    return d, front


def test_widget_traits(run):
    d, _ = _live(run)
    w = d.widget
    assert (w.title, w.current, w.max_steps, w.mem_total, w.device, w.status) == (
        run.name, run.name, 100, 8e9, "cpu", "running")
    assert w.warmup_steps == 3 and w.blocking is True
    assert "export default" in w._esm and "api/kernels/" in w._esm  # the JS is ours, no CDN
    assert "http" not in w._esm.replace("https://", "").split("//")[0]


def test_a_delta_carries_only_new_points_as_float32(run):
    d, front = _live(run)
    d.last_send = time.monotonic()  # just sent: the next points wait for the rate limit
    for step in (1, 2, 3):
        d(_event(step))
    d.flush()
    d.last_send = time.monotonic()
    for step in (4, 5):
        d(_event(step))
    d.flush()
    deltas = front.deltas
    assert [c["n"] for c, _ in deltas] == [3, 2]
    assert _rows(deltas[0])["step"] == [1, 2, 3] and _rows(deltas[1])["step"] == [4, 5]
    assert _rows(deltas[1])["tokens_per_s"] == [4004.0, 4005.0]
    assert _rows(deltas[0])["warmup"] == [0.0, 0.0, 0.0]
    d.flush()
    assert len(front.deltas) == 2, "nothing new, nothing sent"


def test_rate_limit_and_size_hold_over_10000_fast_steps(run):
    d, front = _live(run)
    start = time.monotonic()
    for step in range(1, 10_001):
        d(_event(step))
    elapsed = time.monotonic() - start
    deltas = front.deltas
    assert len(deltas) <= 4 * elapsed + 1, (len(deltas), elapsed)
    for content, buffers in deltas:
        size = len(json.dumps({"method": "custom", "content": content})) + sum(len(b) for b in buffers)
        assert size < 2048, size
    steps = [s for delta in deltas for s in _rows(delta)["step"]]
    assert steps == sorted(steps) and len(set(steps)) == len(steps), "no point sent twice"


def test_history_is_set_once_at_the_end_downsampled(run):
    d, front = _live(run)
    for step in range(1, 5001):
        d(_event(step))
    d({"step": 5000, "phase": "eval", "eval_loss": 0.5})
    before = len(front.messages)
    d({"phase": "end", "status": "completed"})
    hist = d.widget.history[run.name]
    assert len(hist["train"]["step"]) == 2000 and hist["train"]["step"][-1] == 5000
    assert hist["eval"]["eval_loss"] == [0.5]
    assert d.widget.status == "completed"
    history_msgs = [m for m, _ in front.messages[before:] if m.get("method") == "update" and "history" in m.get("state", {})]
    assert len(history_msgs) == 1


def test_stop_message_from_the_view_stops_the_run(run):
    d, front = _live(run)
    assert not run.stop_flag.is_set()
    front.answer({"type": "stop"})
    assert run.stop_flag.is_set()


def test_headless_mode_sends_nothing_live_and_leaves_one_png(run):
    d = Dashboard(run, mode="static")
    assert d.widget is None
    d({"phase": "start", "max_steps": 10, "mem_total": 8e9})
    for step in range(1, 11):
        d(_event(step))
    bundle = d._bundle(with_png=True)
    assert "application/vnd.jupyter.widget-view+json" not in bundle
    png = base64.b64decode(bundle["image/png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<table" in bundle["text/html"]
    assert bundle["image/png"] in bundle["text/html"], "front ends that pick HTML show the plots too"


def test_frontend_detection(monkeypatch):
    assert dash.frontend("auto") == "text"  # plain python, not a kernel
    assert dash.frontend(False) == "off"
    monkeypatch.setattr(dash, "in_notebook", lambda: True)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.delenv("VSCODE_PID", raising=False)
    assert dash.frontend("auto") == "static"  # papermill, nbconvert: nobody watches
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/me/01_quickstart.ipynb")
    assert dash.frontend("auto") == "live"


NOTEBOOK = """
import workbench as wb
run = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), max_steps={steps}, batch_size=2,
               max_length=16, log_every=1, eval_every={eval_every}, run_dir="runs")
wb.record("status", run.status)
wb.record("steps", run.summary["step"])
"""


def test_papermill_notebook_has_one_png_per_run_and_few_stream_outputs(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(NOTEBOOK.format(steps=1000, eval_every=250)),
                nbformat.v4.new_code_cell(NOTEBOOK.format(steps=20, eval_every=10))]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    src, out = tmp_path / "train.ipynb", tmp_path / "train.out.ipynb"
    nbformat.write(nb, src)
    papermill.execute_notebook(str(src), str(out), kernel_name="python3", cwd=str(tmp_path),
                               progress_bar=False)
    saved = nbformat.read(out, as_version=4)
    for cell in saved.cells:
        pngs = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        assert len(pngs) == 1, "exactly one current picture per run"
        assert "application/vnd.jupyter.widget-view+json" not in pngs[0]["data"], "nothing live headless"
        streams = [o for o in cell.outputs if o.output_type == "stream"]
        assert len(streams) < 20, [s.text[:80] for s in streams]
    import workbench as wb

    assert wb.records(out) == {"status": "completed", "steps": 20}
    from nbconvert import HTMLExporter

    page, _ = HTMLExporter().from_notebook_node(saved)
    assert page.count("data:image/png;base64,") >= 2, "nbconvert HTML shows each run's picture"
