"""The dashboard's traits and messages, without a browser; static output under papermill."""

from __future__ import annotations

import base64
import io
import json
import re
import time

import nbformat
import numpy as np
import papermill
import pytest
from PIL import Image

from workbench.rundir.run import write_json
from workbench.training.engine import Run
from workbench.views import chart
from workbench.views import dashboard as dash
from workbench.views.chart import PANELS
from workbench.views.dashboard import Dashboard
from workbench.views.page import saved_output, view_state

from conftest import RecordingFrontend


@pytest.fixture
def run(tmp_path, make_run):
    return Run(make_run(tmp_path, "20260101-000000-test", args={"throughput_warmup_steps": 3},
                        summary={"step": 0}))


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
    assert w.chart == chart.chart_spec({run.name: {}}, 8e9, 3), "the view draws what the PNG draws"
    assert [p["key"] for p in w.chart["panels"]] == [p["key"] for p in PANELS]
    assert w.chart["panels"][4]["heading"] == "device memory (of 7.451 GiB total)"
    # the bundle built from js/ (uPlot included), loaded from the package, not from a CDN
    assert re.search(r"export\s*\{\s*\w+ as default\s*\}", w._esm) and "api/kernels/" in w._esm
    assert "uplot" in w._esm, "uPlot is bundled in"
    assert not re.search(r"https?:", w._esm), "the view loads nothing from the network"
    assert not re.search(r"^\s*import\b|\bimport\s*\(", w._esm, re.M), "and imports no module"


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


def test_one_downsampler_thins_the_messages_and_the_history_alike(run, monkeypatch):
    monkeypatch.setattr(dash, "MIN_INTERVAL", float("inf"))  # nothing goes out before flush(), whatever the clock
    monkeypatch.setattr(dash, "MAX_POINTS", 4)
    monkeypatch.setattr(chart, "HISTORY_POINTS", 4)
    d, front = _live(run)
    for step in range(1, 11):
        d(_event(step))
    d({"step": 10, "phase": "eval", "eval_loss": 0.5})
    d.flush()
    # 10 points into 4: every 2.5th (positions 0, 2.5 -> 2, 5), then always the newest
    assert _rows(front.deltas[0])["step"] == [1, 3, 6, 10]
    d({"phase": "end", "status": "completed"})
    assert d.widget.history[run.name]["train"]["step"] == [1, 3, 6, 10]
    assert d.widget.history[run.name]["eval"] == {"step": [10.0], "time": [None], "eval_loss": [0.5]}


def _panel(key):
    return next(p for p in PANELS if p["key"] == key)


def _hpu(events):
    """The same events as a Gaudi reports them: a cumulative graph-compile count."""
    return [{**e, "compiles": 3 + e["step"] // 5} for e in events]


def test_panels_name_their_units_and_the_fields_sent_live(run):
    panels = {p["key"]: p for p in chart.chart_spec({"a": chart.marks([_event(1)])}, 8 * 2**30, 3)["panels"]}
    assert panels["memory"]["heading"] == "device memory (of 8 GiB total)"
    assert (panels["loss"]["heading"], panels["loss"]["heading_log"]) == ("loss", "loss (log scale)")
    assert panels["throughput"]["heading"] == "throughput (warm-up shaded)"
    assert panels["throughput"]["axis"] == "tokens/s" and panels["throughput"]["drawn"] == {"a": ["tokens_per_s"]}
    assert panels["memory"]["axis"] == "GiB" and panels["compiles"]["axis"] == "compilations (total)"
    assert not panels["compiles"]["shown"] and panels["compiles"]["drawn"] == {"a": []}
    d, front = _live(run)
    d(_hpu([_event(5)])[0])
    d.flush()
    row = _rows(front.deltas[-1])
    assert (row["compiles"], row["mem_peak"], row["lr"], row["step"]) == ([4.0], [2e6], [pytest.approx(1e-3)], [5.0])


def test_throughput_draws_tokens_where_there_are_tokens_else_samples():
    lm = chart.marks([_event(s) for s in (1, 2)])
    images = chart.marks([{**_event(s), "tokens_per_s": None} for s in (1, 2)])
    tput = _panel("throughput")
    assert [s["label"] for s in chart.drawn_series(tput, lm)] == ["tokens/s"]
    assert [s["label"] for s in chart.drawn_series(tput, images)] == ["samples/s"]
    assert [s["label"] for s in chart.drawn_series(_panel("loss"), lm)] == ["train"], "no eval yet"


def _white(img, box) -> bool:
    return all(low == 255 for low, _ in img.crop(box).getextrema())


def test_the_picture_has_a_recompile_panel_when_the_run_counts_compiles():
    cpu = [_event(s) for s in range(1, 21)]  # compiles None: CPU and GPU count none
    hpu = _hpu(cpu)
    four = ["loss", "lr", "throughput", "memory"]
    def shown(*runs):
        return [p["key"] for p in chart.chart_spec({str(i): chart.marks(r) for i, r in enumerate(runs)})["panels"] if p["shown"]]
    assert shown(cpu) == four and shown(hpu) == shown(cpu, hpu) == [*four, "compiles"]
    two = Image.open(io.BytesIO(chart.render_png({"cpu": cpu}))).convert("RGB")
    three = Image.open(io.BytesIO(chart.render_png({"hpu": hpu}))).convert("RGB")
    assert two.width == three.width and three.height > 1.4 * two.height, "a third row of panels"
    w, h, row = three.width, three.height, three.height - two.height
    assert not _white(three, (0, h - row, w // 2, h)), "the recompile panel is drawn"
    assert _white(three, (w // 2 + 10, h - row + 10, w, h)), "the empty slot beside it is blank"


def test_eval_metrics_get_panels_and_travel_with_the_deltas(run):
    d, front = _live(run)
    d(_event(1))
    d({"step": 1, "phase": "eval", "eval_loss": 0.9, "eval_accuracy": 0.5, "eval_rouge1": 0.2,
       "eval_rouge2": 0.1, "time": 0.2})
    d.flush()
    keys = [p["key"] for p in d.widget.chart["panels"]]
    assert keys[:3] == ["loss", "eval_accuracy", "eval_rouge"], "metrics right after the loss"
    rouge = next(p for p in d.widget.chart["panels"] if p["key"] == "eval_rouge")
    assert [s["field"] for s in rouge["series"]] == ["eval_rouge1", "eval_rouge2"], "ROUGE on one panel"
    content, buffers = front.deltas[-1]
    values = np.frombuffer(buffers[1], dtype=np.float32).reshape(content["en"], len(content["efields"]))
    row = dict(zip(content["efields"], values[0].tolist()))
    assert row["eval_accuracy"] == 0.5 and row["eval_rouge1"] == pytest.approx(0.2) and row["time"] == pytest.approx(0.2)


def test_at_the_end_the_output_holds_no_widget_view_only_the_saved_view(run):
    write_json(run.path / "summary.json", {"status": "failed", "step": 2, "error": "OSError: no hub offline; fix: size='tiny'",
                                           "train_loss": float("nan")})
    d, _ = _live(run)
    d.handle = _Handle()
    for step in (1, 2):
        d(_event(step))
    d({"phase": "end", "step": 2, "status": "failed"})
    out = d.handle.data
    assert "application/vnd.jupyter.widget-view+json" not in out, "nothing that needs the kernel"
    assert out["image/png"] in out["text/html"], "the picture is the fallback where scripts do not run"
    text = re.search(r"<script type='application/json' class='wb-state'>(.*?)</script>", out["text/html"], re.S).group(1)
    state = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON: JSON.parse refuses it"))
    assert state["status"] == "failed" and state["summary"]["error"].startswith("OSError: no hub offline")
    from workbench.views.page import finite_json

    assert finite_json({"loss": [float("nan"), 1.0], "x": float("inf")}) == {"loss": [None, 1.0], "x": None}
    assert state["history"][run.name]["train"]["step"] == [1, 2] and state["stoppable"] is False
    assert d.widget.summary["error"] == state["summary"]["error"], "the live view shows it too"


@pytest.fixture
def reads(monkeypatch):
    """Counts each read of a Run's files (spec, summary, status, events)."""
    import collections

    count = collections.Counter()
    for name in ("spec", "summary", "status", "events"):
        prop = getattr(Run, name)

        def counted(self, prop=prop, name=name):
            count[name] += 1
            return prop.fget(self)

        monkeypatch.setattr(Run, name, property(counted))
    return count


class _Handle:
    """A display handle that keeps what it was last updated with."""

    def __init__(self):
        self.data = None

    def update(self, data, raw=False):
        self.data = data


def test_the_dashboard_reads_no_file_while_training_and_the_summary_once_at_the_end(run, reads):
    write_json(run.path / "summary.json", {"status": "completed", "step": 10, "wall_time_s": 12.5})
    d = Dashboard(run, mode="static")
    d.handle = _Handle()
    reads.clear()  # building it reads the spec (the warm-up steps), once
    d({"phase": "start", "max_steps": 10, "mem_total": 8e9})
    for step in range(1, 11):
        d(_event(step))
    d({"step": 10, "phase": "eval", "eval_loss": 0.4})
    assert not reads, f"read {dict(reads)} while the run trained"
    table = d.handle.data["text/html"]
    assert "running" in table and "loss 0.4" in table, "the figures come from the events"
    d({"phase": "end", "step": 10, "status": "completed"})
    assert dict(reads) == {"summary": 1}
    assert "completed" in d.handle.data["text/html"] and "12.5" in d.handle.data["text/html"]


def test_a_comparison_reads_its_runs_once_however_often_it_is_shown(run, reads):
    import pandas as pd

    for step in range(1, 6):
        run.log.emit(_event(step))
    side = dash.Comparison([run, run], pd.DataFrame({run.name: {"steps": 5}, f"{run.name} #2": {"steps": 5}}))
    assert reads["events"] == 2
    reads.clear()
    first, again = side._repr_mimebundle_(), side._repr_mimebundle_()
    assert not reads and first["image/png"] == again["image/png"]
    assert f"{run.name} #2" in first["text/html"], "the same run twice is two columns"


def test_compare_takes_its_runs_as_arguments_or_as_one_list(run):
    """``wb.compare(a, b)`` and ``wb.compare([a, b])`` (a list of runs at hand) are one table;
    a list was read as a path before: TypeError "expected str, bytes or os.PathLike object"."""
    import workbench as wb

    for step in range(1, 4):
        run.log.emit(_event(step))
    spread, listed = wb.compare(run, run.path), wb.compare([run, run.path])
    assert list(listed.table.columns) == [run.name, f"{run.name} #2"]
    assert listed.table.equals(spread.table) and listed.table.loc["steps"].tolist() == [3, 3]


def test_runs_of_a_folder_that_is_not_there_is_an_error_not_an_empty_table(tmp_path):
    """A misspelt ``root`` listed no runs without a word; the default folder not made yet
    still lists none."""
    import workbench as wb

    with pytest.raises(FileNotFoundError, match=r"^root: '\S+/experimnets' does not exist: pass the folder"):
        wb.runs(tmp_path / "experimnets")
    (tmp_path / "file").write_text("")
    with pytest.raises(FileNotFoundError, match="is a file, not a folder"):
        wb.runs(tmp_path / "file")
    assert wb.runs(tmp_path).empty


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


@pytest.mark.slow
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


# ---------------------------------------------------------------- sample grids (text-to-image runs)
def _samples(step, colour, prompts=("a handwritten one", "a handwritten two")):
    """A ``samples`` event: a grid of one 32x32 thumbnail a prompt, all of ``colour``."""
    buf = io.BytesIO()
    Image.new("RGB", (32 * len(prompts), 32), colour).save(buf, format="PNG")
    return {"phase": "samples", "step": step, "time": step * 0.01, "prompts": list(prompts),
            "columns": len(prompts), "image": base64.b64encode(buf.getvalue()).decode()}


def test_a_sample_grid_goes_to_the_view_once_as_png_bytes(run):
    d, front = _live(run)
    d.handle = _Handle()
    grids = [_samples(2, (255, 0, 0)), _samples(4, (0, 0, 255))]
    for step in range(1, 5):
        d(_event(step))
        if step % 2 == 0:
            d(grids[step // 2 - 1])
    d.flush()
    assert d.figures()["step"] == 4 and d.figures()["train_loss"] == 5.0 / 4, "a grid is no training step"
    d({"phase": "end", "step": 4, "status": "completed"})
    sent = [(m["content"], b) for m, b in front.messages
            if m.get("method") == "custom" and m["content"].get("type") == "samples"]
    assert [c["step"] for c, _ in sent] == [2, 4] and sent[0][0]["prompts"] == grids[0]["prompts"]
    assert [b for _, b in sent] == [[base64.b64decode(g["image"])] for g in grids], "the PNG, as bytes"
    assert sent[0][0]["columns"] == 2 and sent[0][0]["run"] == run.name
    others = json.dumps([m for m, _ in front.messages if m.get("content", {}).get("type") != "samples"], default=str)
    assert not any(g["image"] in others for g in grids), "no delta or trait update carries a grid again"


def test_the_saved_output_and_the_picture_keep_the_last_grid(run):
    events = [_event(s) for s in range(1, 5)]
    first, last = _samples(2, (255, 0, 0)), _samples(4, (0, 0, 255))
    with_grids = events[:2] + [first] + events[2:] + [last]
    state = view_state({run.name: with_grids}, {run.name: {"status": "completed"}}, title=run.name,
                       status="completed", current=run.name)
    assert state["samples"] == {run.name: [{k: g[k] for k in ("step", "prompts", "columns", "image")}
                                           for g in (first, last)]}
    out = saved_output({run.name: with_grids}, {run.name: {"status": "completed"}}, state, heading=run.name)
    assert last["image"] in out["text/html"], "the saved view can show the grid without the kernel"
    plain = Image.open(io.BytesIO(chart.render_png({run.name: events})))
    picture = Image.open(io.BytesIO(base64.b64decode(out["image/png"])))
    assert picture.width == plain.width and picture.height > plain.height + 50, "a row for the grid"
    fig = chart.figure({run.name: with_grids})
    (grid_ax,) = [ax for ax in fig.axes if ax.get_title().startswith("samples")]
    assert grid_ax.get_title() == "samples at step 4"
    assert (np.asarray(grid_ax.images[0].get_array())[0, 0] == [0, 0, 255]).all(), "the last grid, pixels as sent"
    assert [t.get_text() for t in grid_ax.get_xticklabels()] == ["a handwritten\none", "a handwritten\ntwo"]
    many = [_samples(s, (s, 0, 0)) for s in range(1, 21)]
    kept = chart.sample_grids(many)
    assert len(kept) == chart.SAVED_GRIDS and kept[-1]["step"] == 20, "a few grids, evenly spaced, the last kept"
    two = chart.figure({"a": with_grids, "b": events})
    assert not any(ax.get_title().startswith("samples") for ax in two.axes), "a comparison draws curves only"


def test_headless_mode_redraws_the_picture_when_a_grid_arrives(run):
    d = Dashboard(run, mode="static")
    d.handle = _Handle()
    d({"phase": "start", "max_steps": 4, "mem_total": 8e9})
    for step in (1, 2):
        d(_event(step))
    d(_samples(2, (0, 255, 0)))
    png = Image.open(io.BytesIO(base64.b64decode(d.handle.data["image/png"])))
    assert png.height > Image.open(io.BytesIO(chart.render_png({run.name: d.events[:2]}))).height


def test_a_run_evaluates_its_last_step_once_and_its_saved_output_lists_each_evaluation(tmp_path, monkeypatch):
    """eval_every dividing max_steps: the last step's evaluation is the final one (it ran twice:
    9 s of notebook 02's 196 s). The saved output keeps a row per evaluation, as Hugging Face's
    notebook progress does: step, epoch, the training loss by then, the eval loss, each metric.
    The step right after an evaluation counts its samples (it read 0 samples/s: its batch was
    collated while the model was still in eval mode, and the throughput line broke there)."""
    import workbench as wb

    monkeypatch.chdir(tmp_path)
    run = wb.train(wb.model("bert", size="tiny"), wb.dataset("docstrings-topic", limit=200), max_steps=8,
                   batch_size=8, eval_every=4, log_every=1, live=False)
    assert run.status == "completed"
    measured = {e["step"]: e["samples_per_s"] for e in run.events if e.get("phase") in ("warmup", "train")}
    assert sorted(measured) == list(range(1, 9)) and all(v > 0 for v in measured.values()), measured
    evals = [e for e in run.events if e.get("phase") == "eval"]
    assert [e["step"] for e in evals] == [4, 8], "one evaluation a step, the last one once"
    from workbench.views.dashboard import saved_run_output

    page = saved_run_output(wb.Run.open(run.path))["text/html"]
    table = re.search(r"<div class='wb-evals'>(.*?)</div>", page, re.S).group(1)
    heads = re.findall(r"<th[^>]*>(.*?)</th>", table)
    assert heads == ["step", "epoch", "train loss", "eval loss", "accuracy"]
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", table)[1:]]
    train = {e["step"]: e for e in run.events if e.get("phase") == "train"}
    assert [r[0] for r in rows] == ["4", "8"]
    for row, e in zip(rows, evals):
        assert row[2] == f"{train[e['step']]['loss']:.4g}" and row[3] == f"{e['eval_loss']:.4g}"
        assert row[4] == f"{e['eval_accuracy']:.4g}"


def test_the_batches_collated_after_an_evaluation_are_counted_and_evaluation_batches_are_not():
    from workbench.shapes.batching import CountingCollator

    class Model:
        training = True

    model = Model()
    counter = CountingCollator(lambda rows: {"input_ids": rows}, model)
    counter([1, 2])  # a training batch
    model.training = False  # the Trainer evaluates
    counter([9] * 5)
    counter.evaluated()  # the evaluation ended; the model is still in eval mode
    counter([3, 4, 5])  # the next step's batch, fetched before training_step sets train mode
    counter.consume(2)
    assert counter.samples == 5, "both training batches, not the evaluation's"
    counter([9] * 7)  # the next evaluation's batch: a step has run since
    counter.consume(1)
    assert counter.samples == 5


def test_a_submitted_runs_job_shows_in_the_header_queued_then_running(run):
    """The follower of a Slurm job sends ``job`` events: the header says queued while the
    job waits, with the job's line beside the device, and keeps the last line at the end."""
    front = RecordingFrontend()
    d = Dashboard(run, mode="live", sink=front)
    d({"phase": "job", "job": "slurm job 12: PENDING (Resources)", "waiting": True})
    assert (d.widget.status, d.widget.device) == ("queued", "slurm job 12: PENDING (Resources)")
    assert d.figures()["status"] == "queued"
    d({"phase": "job", "job": "slurm job 12: RUNNING on n[1-2]", "waiting": False})
    d({"phase": "start", "max_steps": 10, "mem_total": 8e9, "device": "cpu"})
    assert (d.widget.status, d.widget.device) == ("running", "cpu · slurm job 12: RUNNING on n[1-2]")
    d({"phase": "job", "job": "slurm job 12: COMPLETED on n[1-2]", "waiting": False})
    write_json(run.path / "summary.json", {**run.summary, "status": "completed", "step": 10})
    run.refresh()
    d({"phase": "end", "status": "completed"})
    assert (d.widget.status, d.widget.device) == ("completed", "cpu · slurm job 12: COMPLETED on n[1-2]")
    assert not any(e.get("phase") == "job" for e in d.events), "shown, never kept as an event"
    static = Dashboard(run, mode="static")
    static({"phase": "job", "job": "slurm job 13: PENDING (Priority)", "waiting": True})
    html = static._bundle(with_png=False)["text/html"]
    assert "slurm job 13: PENDING (Priority)" in html and "queued" in html
