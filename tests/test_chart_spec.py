"""The chart's drawing rules live in one spec, workbench/assets/chart.json, that both
renderers read: the picture (views/chart.py, matplotlib) and the view (js/src/chart.js,
uPlot, fed the spec in its state). Here without a browser: the spec's shape, the picture
following a changed spec, the view's state carrying it, and neither renderer writing a rule
of its own. tests/test_chart_view.py checks the browser's side."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from workbench.views import chart, page

ROOT = Path(__file__).resolve().parents[1]
RENDERERS = [
    ROOT / "workbench/views/chart.py",
    ROOT / "workbench/views/dashboard.py",
    ROOT / "workbench/views/page.py",
    *sorted((ROOT / "js/src").glob("*.js")),
]


def _events(n=12, compiles=True, tokens=True):
    out = []
    for s in range(1, n + 1):
        out.append({"step": s, "phase": "warmup" if s <= 2 else "train", "loss": 3.0 / s, "lr": 1e-3,
                    "grad_norm": 1.0, "tokens_per_s": 4000.0 + s if tokens else None, "samples_per_s": 30.0,
                    "mem_alloc": 1.5e9, "mem_peak": 2.5e9, "compiles": 3 + s // 4 if compiles else None,
                    "time": 0.1 * s})
    out.append({"step": n, "phase": "eval", "eval_loss": 0.5, "eval_accuracy": 0.7, "time": 0.1 * n})
    return out


def test_the_spec_is_the_chart_both_renderers_read():
    raw = json.loads(chart.SPEC_PATH.read_text())
    assert chart.SPEC == {k: v for k, v in raw.items() if not k.startswith("$")}
    assert chart.PANELS is chart.SPEC["panels"]
    keys = [p["key"] for p in chart.PANELS]
    assert len(set(keys)) == len(keys), "a key names one panel"
    for panel in chart.PANELS:
        assert panel["title"] and panel["series"], panel
        for s in panel["series"]:
            assert s["field"] and s["label"] and re.fullmatch(r"#[0-9a-f]{6}", s["colour"]), s
            assert s.get("style", "solid") in chart.SPEC["line"]["styles"], s
    assert chart.SPEC["metric_panels"]["after"] in keys
    # what is sent live follows from the spec's series
    fields = {s["field"] for p in chart.PANELS for s in p["series"]}
    assert fields <= {*chart.TRAIN_FIELDS, *chart.EVAL_FIELDS}
    # the view's state carries the spec, with the run's eval metrics' panels
    state = page.view_state({"a": _events()}, {}, title="a", status="completed", current="a")
    assert state["chart"] == chart.chart_spec({"a": chart.marks(_events())})
    assert [p["key"] for p in state["chart"]["panels"]][:2] == ["loss", "eval_accuracy"]
    state["chart"]["panels"][0]["title"] = "objective"
    assert chart.chart_spec()["panels"][0]["title"] == "loss", "a run's spec is its own copy"
    assert chart.chart_spec(spec=state["chart"]) == chart.chart_spec(spec=chart.chart_spec(spec=state["chart"])), \
        "reading a read spec again changes nothing"


def _drawn(fig):
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    return {ax.get_title(): [(ln.get_label(), ln.get_color()) for ln in ax.get_lines()] for ax in axes}


def test_the_picture_draws_every_panel_and_series_of_the_spec():
    spec = chart.chart_spec({"a": chart.marks(_events())})
    drawn = _drawn(chart.figure({"a": _events()}, spec=spec))
    images = _drawn(chart.figure({"a": _events(tokens=False)}, spec=spec))  # throughput: samples/s
    titles = [t.split(" (")[0] for t in drawn]
    assert titles == [p["title"] for p in spec["panels"]]
    labels = {label for d in (drawn, images) for lines in d.values() for label, _ in lines}
    assert labels == {s["label"] for p in spec["panels"] for s in p["series"]}



def test_a_step_axis_has_whole_ticks_in_both_renderers():
    """Two steps into a run, the step axis ticks 0, 1, 2 (not 0.5, 1.5): both renderers read
    the spec's x.whole. The live view's increments come from js/src/chart.js, run by node."""
    assert chart.SPEC["x"]["whole"] == ["step"]
    fig = chart.figure({"a": _events(n=2)})
    for ax in (a for a in fig.axes if a.get_visible() and a.get_title()):
        ax.figure.canvas.draw()
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), (ax.get_title(), ticks)
    node = shutil.which("node")
    if node is None or not any((d / "node_modules" / "uplot").exists() for d in (ROOT, ROOT / "js")):
        pytest.skip("node and the js build's node_modules (make js) check the live view's ticks")
    script = ("import {xIncrs} from './js/src/chart.js';"
              f"const spec = {json.dumps(chart.SPEC)};"
              "console.log(JSON.stringify([xIncrs(spec, 'step'), xIncrs(spec, 'time')]));")
    out = subprocess.run([node, "--input-type=module", "-e", script], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    step, time = json.loads(out)
    assert step and min(step) == 1 and all(float(v).is_integer() for v in step)
    assert 0.5 in time and 0.2 in time, "a time axis keeps its fractional ticks"


def changed_spec(spec: dict) -> dict:
    """A copy of ``spec`` with every kind of change a renderer must follow: the loss panel
    renamed, its series relabelled and recoloured, the log note reworded, the compiles panel
    dropped and a wall-clock panel added (tests/test_chart_view.py draws it in a browser)."""
    spec = copy.deepcopy(spec)
    loss = spec["panels"][0]
    loss["title"], loss["series"][0]["label"], loss["series"][0]["colour"] = "objective", "training", "#123456"
    spec["notes"]["log"] = "log axis"
    spec["panels"] = [p for p in spec["panels"] if p["key"] != "compiles"]
    spec["panels"].append({"key": "clock", "title": "wall clock", "series": [
        {"field": "time", "label": "seconds", "colour": "#654321"}]})
    return spec

def test_a_changed_spec_changes_the_picture():
    spec = changed_spec(chart.chart_spec())
    drawn = _drawn(chart.figure({"a": _events()}, spec=spec))
    assert drawn["objective (log axis)"][0] == ("training", "#123456")
    assert "graph compilations" not in drawn and drawn["wall clock"] == [("seconds", "#654321")]
    assert "graph compilations" in _drawn(chart.figure({"a": _events()})), "the file's spec unchanged"


@pytest.mark.policy
def test_no_renderer_writes_a_drawing_rule_of_its_own():
    """Colours, titles, axis labels, notes, dash patterns and paddings are the spec's: neither
    views/*.py nor js/src/*.js spells one as a literal."""
    spec = chart.SPEC
    fields = {s["field"] for p in spec["panels"] for s in p["series"]}  # names of data, not rules
    words = {p["title"] for p in spec["panels"]} | {p["ylabel"] for p in spec["panels"] if "ylabel" in p}
    words |= {spec["notes"]["log"], spec["notes"]["warmup"], *spec["x"]["labels"].values()} - {"step"}
    words |= {s["label"] for p in spec["panels"] for s in p["series"] if len(s["label"]) > 5} - {
        "tokens/s", "samples/s"}  # the figures table's and the header's words, not the chart's
    words = words - fields | {spec["empty"]["text"]}
    literals = [re.compile(r"#[0-9a-fA-F]{6}\b|#[0-9a-fA-F]{3}\b(?![-\w])"),  # a colour
                re.compile(r"rgba?\(\s*\d"),
                re.compile(r"\[\s*[236]\s*,\s*3\s*\]"),  # a dash pattern
                re.compile(r"(?<![\w.])(1\.03|1\.08|0\.13|0\.06)(?![\w.])"),  # a padding, an alpha
                re.compile(r"-28\b"),  # the run name's length in a legend
                *(re.compile(rf"[\"'`]{re.escape(w)}[\"'`]") for w in words)]
    found = []
    for path in RENDERERS:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = re.sub(r"(^|\s)//.*$", "", line) if path.suffix == ".js" else line  # comments
            found += [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for rx in literals if rx.search(code)]
    assert not found, "drawing rules belong in workbench/assets/chart.json:\n" + "\n".join(found)


@pytest.mark.policy
def test_what_a_panel_means_is_read_in_python_once():
    """Which panels show, which series each run draws, the titles with their notes, the y label
    (its ``unit``) and the device's total are chart_spec's: js/src/chart.js draws the ``shown``,
    ``drawn``, ``heading``, ``axis`` and ``device_total`` it is handed and reads none of the
    spec's fields they come from (once each renderer read them its own way: the view's y label
    took a series' ``unit`` the picture ignored)."""
    spec = chart.chart_spec({"a": chart.marks(_events())}, 8 * 2**30, 2)
    memory = next(p for p in spec["panels"] if p["key"] == "memory")
    assert (memory["heading"], memory["axis"], memory["device_total"]) == ("device memory (of 8 GiB total)", "GiB", 8)
    code = re.sub(r"(^|\s)//.*", "", (ROOT / "js/src/chart.js").read_text())  # what draws the panels
    read = [f for f in ("title", "ylabel", "unit", "notes", "one_of", "optional", "total")
            if re.search(rf"\.{f}\b|\[[\"']{f}[\"']\]", code)]
    assert not read, f"js/src/chart.js reads the spec's {read}: what they mean is chart_spec's"
    for field in ("shown", "drawn", "heading", "heading_log", "axis", "device_total"):
        assert re.search(rf"\.{field}\b", code), f"js/src/chart.js draws the {field} it is handed"


def test_both_renderers_write_a_number_alike():
    """The ticks' numbers: views/chart.py's _fmt_number and js/src/chart.js's fmt, run by node."""
    values = [0, 1, 2.5, 0.1234567, 999.94, 1000, 12345.6, 1e6, 2.5e-4, -0.5, 7.450580596923828]
    node = shutil.which("node")
    if node is None or not any((d / "node_modules" / "uplot").exists() for d in (ROOT, ROOT / "js")):
        pytest.skip("node and the js build's node_modules (make js) run the live view's fmt")
    script = f"import {{fmt}} from './js/src/chart.js'; console.log(JSON.stringify({values}.map(fmt)));"
    out = subprocess.run([node, "--input-type=module", "-e", script], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out) == [chart._fmt_number(v) for v in values]
