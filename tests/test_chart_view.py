"""The dashboard's view in real headless Chromium, without JupyterLab: a run's saved output.

The saved output (workbench/page.py) runs the same view as the live widget (js/src/), so
what is checked here holds for both: the panels and legends are the static picture's, the
chart spans its container and follows it, hover shows every series' value at a step, drag
zooms every panel and double-click zooms out, smoothing keeps the raw line faint, the x
axis can be wall-clock time, a failed run shows its error, and a text-to-image run's picture
panel shows its sample grids (saved, and live from the widget's messages). Where scripts do
not run the picture shows instead (checked with JavaScript off).
"""

from __future__ import annotations

import contextlib
import copy
import math

import pytest
from lab_harness import ARTIFACTS, STALL_CAP_MS, browser_page, require_chromium, stall_limit_ms
from test_chart_spec import changed_spec

from workbench.views import chart, page

pytestmark = pytest.mark.browser


def _events(n=120, every=40, metrics=True, compiles=False):
    out = []
    for s in range(1, n + 1):
        out.append({"step": s, "phase": "warmup" if s <= 5 else "train", "loss": 4 * math.exp(-s / 50) + 0.2 + 0.1 * (s % 3),
                    "lr": 1e-3 * (1 - s / n), "grad_norm": 1 + 0.3 * math.cos(s / 5), "tokens_per_s": 4000.0 + s,
                    "samples_per_s": 31.0, "mem_alloc": 1.5e9, "mem_peak": 2.5e9,
                    "compiles": 3 + s // 40 if compiles else None, "time": 0.05 * s})
        if s % every == 0:
            out.append({"step": s, "phase": "eval", "eval_loss": 4 * math.exp(-s / 50) + 0.4, "time": 0.05 * s,
                        **({"eval_accuracy": s / (2 * n)} if metrics else {})})
    return out


SUMMARY = {"status": "completed", "step": 120, "train_loss": 0.9, "eval": {"loss": 0.95, "accuracy": 0.5},
           "tokens_per_s": 4060.0, "mem_peak": 2.5e9, "wall_time_s": 6.0}


def _html(runs, summaries, current="a", **kw) -> str:
    state = page.view_state(runs, summaries, title=kw.pop("title", current or "runs"), status=kw.pop("status", "completed"),
                            current=current, max_steps=120, warmup_steps=5, device="cpu", mem_total=8 * 2**30, **kw)
    out = page.saved_output(runs, summaries, state, heading=current)
    return f"<html><body style='margin:0'><div id='host' style='width:1000px'>{out['text/html']}</div></body></html>"


@pytest.fixture
def browser():
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


def _widget_page(state: dict, script: str) -> str:
    """A page running the widget's bundle under a stand-in anywidget model holding ``state``
    (``handlers``: what the view listens to), then ``script``."""
    import json
    import re

    bundle = re.sub(r"export\s*\{\s*(\w+) as default\s*\};?", r"window.wbWidget = \1;",
                    page.asset("dashboard.js").read_text())
    return (f"<html><body><div id='host' style='width:1000px'></div><script type='module'>{bundle}\n"
            f"const state = {json.dumps(state)}; const handlers = {{}};\n"
            "const model = { get: (k) => state[k], on: (e, f) => (handlers[e] ||= []).push(f), set() {}, "
            "save_changes() {}, send() {} };\n"
            "window.wbWidget.render({ model, el: document.getElementById('host') });\n"
            f"{script}</script></body></html>")

@contextlib.contextmanager
def _open(pw, tmp_path, html, name, **page_args):
    """``html`` in a Chromium page: (page, the page's uncaught errors); a screenshot on failure."""
    path = tmp_path / f"{name}.html"
    path.write_text(html)
    with browser_page(pw, name, viewport={"width": 1100, "height": 1400}, **page_args) as pg:
        errors = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto(path.as_uri())
        yield pg, errors


def _texts(pg, selector):
    return pg.eval_on_selector_all(selector, "els => els.map(e => e.textContent.trim())")


CASES = {"cpu": {"a": _events()},
         "hpu": {"a": _events(compiles=True)},
         "two runs": {"a": _events(metrics=False), "b": _events(metrics=False, compiles=True)}}


@pytest.mark.parametrize("case", list(CASES))
def test_the_view_draws_the_panels_and_legends_the_picture_has(browser, tmp_path, case):
    runs = CASES[case]
    with _open(browser, tmp_path, _html(runs, {"a": SUMMARY}), f"view-{case.replace(' ', '-')}") as (pg, errors):
        pg.wait_for_selector(".wb-saved .wb-panel .u-title")
        titles = _texts(pg, ".wb-panel .u-title")
        # legends: the view lists the x value first and, smoothed, a faint raw line per curve
        legends = [t.split(":")[0] for t in _texts(pg, ".wb-panel .u-legend .u-series th")]
        assert not errors, errors
        assert pg.is_hidden(".wb-fallback"), "the chart replaced the picture"
    fig = chart.figure(runs, mem_total=8 * 2**30, warmup_steps=5)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert titles == [ax.get_title() for ax in axes]
    picture = [t.get_text() for ax in axes for t in ax.get_legend().get_texts()]
    assert [t for t in legends if t != "step" and not t.endswith("(raw)")] == picture
    assert ("graph compilations" in titles) == (case != "cpu"), "recompiles shown where counted"


def _view_state_of(pg):
    """Per drawn panel (in order): its title and, per series, its legend label and colour."""
    return pg.evaluate("() => document.querySelector('.wb-dash').wbChart.plots.map(p => [p.wbPanel, "
                       "p.root.querySelector('.u-title').textContent, p.series.slice(1).map("
                       "(s, i) => [s.label, typeof s.stroke === 'function' ? s.stroke(p, i + 1) : s.stroke])])")


def test_every_panel_and_series_of_the_spec_is_drawn_by_both_renderers(browser, tmp_path):
    """Two runs between them report every field: each panel of the spec and each series shows
    in the view and in the picture (a series in the second run's colour, its name first)."""
    import copy

    runs = {"a": _events(compiles=True), "b": [{**e, "tokens_per_s": None} for e in _events()]}
    spec = chart.chart_spec({n: chart.marks(e) for n, e in runs.items()})
    with _open(browser, tmp_path, _html(runs, {"a": SUMMARY}, current=""), "view-every-series") as (pg, errors):
        pg.wait_for_selector(".wb-saved .wb-panel .u-title")
        view = _view_state_of(pg)
        assert not errors, errors
    assert [key for key, _, _ in view] == [p["key"] for p in spec["panels"]]
    fig = chart.figure(runs, mem_total=8 * 2**30, warmup_steps=5, spec=copy.deepcopy(spec))
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert [title for _, title, _ in view] == [ax.get_title() for ax in axes]
    picture = [[(ln.get_label(), ln.get_color()) for ln in ax.get_lines() if not ln.get_label().startswith("_")]
               for ax in axes]
    drawn = [[(label, colour) for label, colour in series if not label.endswith("(raw)")] for _, _, series in view]
    assert drawn == picture
    labels = {label.split(" ", 1)[1] for panel in drawn for label, _ in panel}
    assert labels == {s["label"] for p in spec["panels"] for s in p["series"]}


def test_a_changed_spec_changes_both_renderers(browser, tmp_path):
    """The saved output draws the view and the picture from the state's spec: a panel renamed,
    a series relabelled and recoloured, a note reworded, a panel dropped and one added."""

    runs = {"a": _events(compiles=True)}
    state = page.view_state(runs, {"a": SUMMARY}, title="a", status="completed", current="a", max_steps=120,
                            warmup_steps=5, device="cpu", mem_total=8 * 2**30)
    state["chart"] = chart.chart_spec({"a": chart.marks(runs["a"])}, 8 * 2**30, 5, changed_spec(state["chart"]))
    out = page.saved_output(runs, {"a": SUMMARY}, state, heading="a")
    html = f"<html><body style='margin:0'><div id='host' style='width:1000px'>{out['text/html']}</div></body></html>"
    with _open(browser, tmp_path, html, "view-changed-spec") as (pg, errors):
        pg.wait_for_selector(".wb-saved .wb-panel .u-title")
        view = {key: (title, series) for key, title, series in _view_state_of(pg)}
        assert not errors, errors
    assert view["loss"][0] == "objective (log axis)" and ["training", "#123456"] in view["loss"][1]
    assert "compiles" not in view and view["clock"] == ("wall clock", [["seconds", "#654321"]])
    import base64
    import io

    from PIL import Image

    picture = Image.open(io.BytesIO(base64.b64decode(out["image/png"])))
    fig = chart.figure(runs, mem_total=8 * 2**30, warmup_steps=5, spec=state["chart"])
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert titles == [title for title, _ in view.values()], "the picture by the same spec"
    assert picture.size == tuple(int(v) for v in fig.get_size_inches() * fig.dpi), "the saved picture is that one"


def test_hover_zoom_smoothing_time_axis_and_width(browser, tmp_path):
    events = _events()
    with _open(browser, tmp_path, _html({"a": events}, {"a": SUMMARY}), "view-interactions") as (pg, errors):
        pg.wait_for_selector(".wb-panel .u-over")
        host = pg.eval_on_selector("#host", "e => e.clientWidth")
        grid = pg.eval_on_selector(".wb-grid", "e => e.clientWidth")
        panels = pg.eval_on_selector_all(".wb-panel .uplot", "els => els.map(e => e.offsetWidth)")
        assert grid > 0.95 * host and sum(panels[:2]) > 0.95 * grid, (host, grid, panels)
        # hover the middle of the loss panel: every legend shows the value at that step
        over = pg.locator(".wb-panel[data-panel='loss'] .u-over").bounding_box()
        pg.mouse.move(over["x"] + over["width"] * 0.5, over["y"] + over["height"] * 0.5)
        pg.wait_for_function("() => document.querySelector(\".wb-panel[data-panel='lr'] .u-legend .u-value\")"
                             "?.textContent.trim() !== '–'")
        values = _texts(pg, ".wb-panel[data-panel='loss'] .u-legend .u-value")
        step = int(values[0].replace(",", ""))
        raw = next(e["loss"] for e in events if e.get("phase") != "eval" and e["step"] == step)
        assert float(values[1]) == pytest.approx(raw, rel=1e-3), "the raw train loss at that step"
        lr = float(_texts(pg, ".wb-panel[data-panel='lr'] .u-legend .u-value")[1])
        assert lr == pytest.approx(1e-3 * (1 - step / 120), rel=1e-3), "other panels follow the cursor"
        # drag across a quarter of the plot: every panel zooms to it; double-click zooms out
        x0, y = over["x"] + over["width"] * 0.25, over["y"] + over["height"] * 0.5
        pg.mouse.move(x0, y)
        pg.mouse.down()
        pg.mouse.move(x0 + over["width"] * 0.25, y, steps=5)
        pg.mouse.up()
        scales = pg.evaluate("() => document.querySelector('.wb-dash').wbChart.plots.map(p => [p.scales.x.min, p.scales.x.max])")
        full = 120 * 1.03
        for lo, hi in scales:
            assert lo == pytest.approx(full * 0.25, rel=0.05) and hi == pytest.approx(full * 0.5, rel=0.05), scales
        pg.mouse.dblclick(x0, y)
        scales = pg.evaluate("() => document.querySelector('.wb-dash').wbChart.plots.map(p => [p.scales.x.min, p.scales.x.max])")
        assert all(lo == 0 and hi == pytest.approx(full) for lo, hi in scales), scales
        # smoothing off: no raw line; the x axis by wall-clock time
        pg.eval_on_selector(".wb-smooth", "e => { e.value = '0'; e.dispatchEvent(new Event('input')); }")
        pg.wait_for_function("() => ![...document.querySelectorAll('.u-legend th')].some(t => t.textContent.includes('(raw)'))")
        pg.locator(".wb-x").select_option("time")
        pg.wait_for_function("() => document.querySelector('.wb-dash').wbChart.plots.every("
                             "p => p.axes[0].label === 'time (s)' && Math.abs(p.scales.x.max - 6 * 1.03) < 1e-6)")
        # the container narrows: one panel a row, each as wide as the chart
        pg.eval_on_selector("#host", "e => e.style.width = '560px'")
        pg.wait_for_function("() => [...document.querySelectorAll('.wb-panel .uplot')].every("
                             "p => p.offsetWidth > 0.95 * document.querySelector('.wb-grid').clientWidth)")
        pg.screenshot(path=str(ARTIFACTS / "view-interactions.png"), full_page=True)
        assert not errors, errors


def test_a_failed_run_shows_its_error_and_without_scripts_the_picture(browser, tmp_path):
    failed = {**SUMMARY, "status": "failed", "error": "OSError: cannot load 'gpt2' while offline: use size='tiny'"}
    html = _html({"a": _events(n=3)}, {"a": failed}, status="failed")
    with _open(browser, tmp_path, html, "view-failed") as (pg, errors):
        pg.wait_for_selector(".wb-error")
        assert pg.locator(".wb-status").inner_text() == "failed"
        assert "cannot load 'gpt2' while offline" in pg.locator(".wb-error").inner_text()
        assert not errors, errors
    with _open(browser, tmp_path, html, "view-no-scripts", java_script_enabled=False) as (pg, _):
        assert pg.locator(".wb-fallback img").is_visible(), "no scripts: the picture"
        assert "cannot load" in pg.locator(".wb-fallback table").inner_text(), "and the error in the table"


def test_a_run_that_failed_before_its_first_step_shows_at_once(browser, tmp_path):
    """No logged step: the loss panel is empty. On a log axis its range was [0, 1], and uPlot's
    log-axis tick loop ran to the array limit (a 6-8 s frozen page, then "RangeError: Invalid
    array length"); browser_page fails on that error and on a main-thread stall over 1 s."""
    failed = {"status": "failed", "step": 0, "error": "OSError: cannot load 'gpt2' while offline"}
    html = _html({"a": []}, {"a": failed}, status="failed")  # saved with "log loss" on
    with _open(browser, tmp_path, html, "view-failed-at-step-0") as (pg, errors):
        pg.wait_for_selector(".wb-error")
        assert pg.locator(".wb-status").inner_text() == "failed"
        assert "cannot load 'gpt2' while offline" in pg.locator(".wb-error").inner_text()
        # the view toggles the scale: both ways again, with nothing to draw
        pg.locator(".wb-log").click()
        pg.locator(".wb-log").click()
        pg.wait_for_function("() => document.querySelector('.wb-dash').wbChart.plots.length > 0")
        assert not errors, errors


def test_the_stall_limit_grows_with_the_load_and_stays_under_the_uplot_freeze():
    """1 s with a core free; the load over the cores times that on a busier machine (at load
    10+ on two cores an ordinary redraw passed 1 s); never above 4 s, under the 6-8 s freeze
    of an empty log-scale panel (which measured 6.4-7.2 s at load 4-5 on two cores)."""
    assert stall_limit_ms(0.5, 2) == stall_limit_ms(2.0, 2) == 1000
    assert stall_limit_ms(5.0, 2) == 2500
    assert stall_limit_ms(40.0, 2) == STALL_CAP_MS == 4000 < 6000


@pytest.mark.parametrize("values", [[0.0, 0.0], [1.0, 1.0], [-2.0, 0.0], [1e-9, 1e-9]],
                         ids=["zeros", "one-decade-value", "non-positive", "tiny"])
def test_a_log_loss_panel_of_degenerate_values_draws_at_once(browser, tmp_path, values):
    """Values a log axis cannot span on their own: every one 0 or below, or all one power of ten."""
    events = [{"step": s + 1, "phase": "train", "loss": v, "time": 0.1 * (s + 1)} for s, v in enumerate(values)]
    html = _html({"a": events}, {"a": {**SUMMARY, "step": len(values)}})
    with _open(browser, tmp_path, html, "view-degenerate-log") as (pg, errors):
        pg.wait_for_function("() => document.querySelector('.wb-dash')?.wbChart.plots.length > 0")
        ranges = pg.evaluate("() => document.querySelector('.wb-dash').wbChart.plots"
                             ".filter(p => p.wbPanel === 'loss').map(p => [p.scales.y.min, p.scales.y.max])")
        assert ranges and all(0 < lo < hi for lo, hi in ranges if lo is not None), ranges
        assert not errors, errors


def test_nbconvert_html_of_a_saved_notebook_shows_the_interactive_chart(browser, tmp_path):
    import nbformat
    from nbconvert import HTMLExporter

    runs = {"a": _events()}
    state = page.view_state(runs, {"a": SUMMARY}, title="a", status="completed", current="a", max_steps=120)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("run = wb.train(...)")
    cell.outputs = [nbformat.v4.new_output("display_data", data=page.saved_output(runs, {"a": SUMMARY}, state, "a"))]
    nb.cells = [cell]
    html, _ = HTMLExporter().from_notebook_node(nb)
    with _open(browser, tmp_path, html, "view-nbconvert") as (pg, errors):
        pg.wait_for_selector(".wb-saved[data-mounted] .wb-panel .u-title")
        assert pg.locator(".wb-dash .wb-status").inner_text() == "completed"
        assert "wall time" in pg.locator(".wb-dash .wb-summary").inner_text()
        assert not errors, errors


def _grid_event(step, colour, prompts=("a handwritten one", "a handwritten two")):
    """A text-to-image run's ``samples`` event: one 32x32 thumbnail a prompt, all of ``colour``."""
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (32 * len(prompts), 32), colour).save(buf, format="PNG")
    return {"phase": "samples", "step": step, "time": 0.05 * step, "prompts": list(prompts),
            "columns": len(prompts), "image": base64.b64encode(buf.getvalue()).decode()}


def _shown(pg):
    return pg.evaluate("() => { const i = document.querySelector('.wb-samples-img'); return {title: "
                       "document.querySelector('.wb-samples-title').textContent, step: i.dataset.step, "
                       "natural: i.naturalWidth, width: i.offsetWidth, src: i.src.slice(0, 5)}; }")


def test_the_picture_panel_shows_the_last_grid_and_steps_back_through_earlier_ones(browser, tmp_path):
    events = _events()
    events.insert(60, _grid_event(60, (255, 0, 0)))
    events.append(_grid_event(120, (0, 0, 255)))
    with _open(browser, tmp_path, _html({"a": events}, {"a": SUMMARY}), "view-samples") as (pg, errors):
        pg.wait_for_function("() => document.querySelector('.wb-samples-img')?.naturalWidth > 0")
        assert _shown(pg) == {"title": "samples at step 120 (2 of 2)", "step": "120", "natural": 64, "width": 128,
                              "src": "data:"}, "the latest grid, thumbnails drawn twice their size"
        assert _texts(pg, ".wb-samples-prompts span") == ["a handwritten one", "a handwritten two"]
        assert pg.is_disabled(".wb-samples-next")
        pg.click(".wb-samples-prev")
        pg.wait_for_function("() => document.querySelector('.wb-samples-img').dataset.step === '60'")
        assert _shown(pg)["title"] == "samples at step 60 (1 of 2)" and pg.is_disabled(".wb-samples-prev")
        pg.click(".wb-samples-next")
        pg.wait_for_function("() => document.querySelector('.wb-samples-img').dataset.step === '120'")
        pg.screenshot(path=str(ARTIFACTS / "view-samples.png"), full_page=True)
        assert not errors, errors
    with _open(browser, tmp_path, _html({"a": _events()}, {"a": SUMMARY}), "view-no-samples") as (pg, errors):
        pg.wait_for_selector(".wb-panel .u-title")
        assert pg.is_hidden(".wb-samples"), "a run without grids has no picture panel"


def test_the_live_view_shows_a_grid_from_its_message_bytes(browser, tmp_path):
    """The widget's bundle (dashboard.js) under a stand-in anywidget model: a grid arrives as
    one message whose buffer is the PNG, and the panel shows it."""

    state = page.view_state({"a": _events(n=3)}, {}, title="a", status="running", current="a", max_steps=120)
    del state["samples"]  # the live widget has no such trait: grids come as messages
    html = _widget_page(state, (
            "window.wbSend = (msg, b64) => { const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));\n"
            "  handlers['msg:custom'].forEach((f) => f(msg, [new DataView(bytes.buffer)])); };"))
    with _open(browser, tmp_path, html, "view-live-samples") as (pg, errors):
        pg.wait_for_function("() => window.wbSend && document.querySelector('.wb-panel .u-title')")
        assert pg.is_hidden(".wb-samples"), "no grid yet"
        for step, colour in ((2, (255, 0, 0)), (4, (0, 0, 255))):
            grid = _grid_event(step, colour)
            msg = {"type": "samples", "run": "a", "step": step, "prompts": grid["prompts"], "columns": 2}
            pg.evaluate("([m, b]) => window.wbSend(m, b)", [msg, grid["image"]])
            pg.wait_for_function(f"() => document.querySelector('.wb-samples-img').dataset.step === '{step}' "
                                 "&& document.querySelector('.wb-samples-img').naturalWidth > 0")
        assert _shown(pg) == {"title": "samples at step 4 (2 of 2)", "step": "4", "natural": 64, "width": 128,
                              "src": "blob:"}
        pixel = pg.evaluate("() => { const i = document.querySelector('.wb-samples-img'); const c = "
                            "document.createElement('canvas'); c.width = i.naturalWidth; c.height = i.naturalHeight; "
                            "const g = c.getContext('2d'); g.drawImage(i, 0, 0); return [...g.getImageData(0, 0, 1, 1).data]; }")
        assert pixel == [0, 0, 255, 255], "the PNG bytes as sent"
        assert not errors, errors


def test_the_live_view_redraws_by_a_new_chart_spec(browser, tmp_path):
    """The widget's bundle under a stand-in model: the kernel sets the ``chart`` trait (a run's
    first eval metric adds its panel) and the view draws by the new spec."""

    state = page.view_state({"a": _events(n=45, metrics=False)}, {}, title="a", status="running", current="a",
                            max_steps=120)
    spec = copy.deepcopy(chart.SPEC)
    spec["panels"][0]["title"] = "objective"
    changed = chart.chart_spec({"a": chart.marks(_events(n=45))}, spec=spec)
    html = _widget_page(state, (
            "window.wbSet = (k, v) => { state[k] = v; (handlers[`change:${k}`] || []).forEach((f) => f()); };"))
    keys = "() => document.querySelector('.wb-dash').wbChart.plots.map(p => p.wbPanel).join(',')"
    with _open(browser, tmp_path, html, "view-live-spec") as (pg, errors):
        pg.wait_for_function("() => window.wbSet && document.querySelector('.wb-panel .u-title')")
        assert "eval_accuracy" not in pg.evaluate(keys)
        pg.evaluate("(spec) => window.wbSet('chart', spec)", changed)
        pg.wait_for_function(f"() => ({keys})().startsWith('loss,eval_accuracy,')")
        assert _texts(pg, ".wb-panel .u-title")[0] == "objective (log scale)"
        assert not errors, errors


def _duration(s: float) -> str:
    """js/src/view.js's duration()."""
    h, m, sec = int(s // 3600), int(s % 3600 // 60), int(s % 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{sec:02d}s" if m else f"{sec}s"


def test_the_headers_eta_is_the_side_panels(browser, tmp_path):
    """The same moment, the same ETA: the header timed the whole run (warm-up included), the
    panel the recent steps after warm-up (53m57s against 45m27s in a course run)."""
    import json

    from workbench.server.tail import EventTail

    events = []
    for s in range(1, 61):  # 5 slow warm-up steps (compiles), then a steady pace, 60 of 120
        t = 4.0 * s if s <= 5 else 20 + 0.5 * (s - 5) * (1 + 0.2 * (s % 2))
        events.append({**_events(n=60)[s - 1], "time": t})
    events = [e for e in events if e["phase"] != "eval"]
    log = tmp_path / "events.jsonl"
    log.write_text("".join(json.dumps(e) + "\n" for e in [{"phase": "start", "step": 0, "max_steps": 120}, *events]))
    tail = EventTail(log)
    tail.poll()
    want = f"ETA {_duration(tail.eta_s(120))}"
    html = _html({"a": events}, {"a": {"status": "running"}}, status="running")
    with _open(browser, tmp_path, html, "view-eta") as (pg, errors):
        assert pg.locator(".wb-time").inner_text().endswith(want), (pg.locator(".wb-time").inner_text(), want)
        assert not errors, errors
