"""A real JupyterLab in a real headless Chromium: the live dashboard, Stop, a restart, the form.

Starts JupyterLab on 127.0.0.1 with token auth (tests/lab_harness.py), opens the quickstart
notebook (its parameters made long enough to press Stop), runs it, checks that the chart
draws, the step counter advances, the chart spans its output (and still after the window
narrows), hover shows values and drag zooms; clicks Stop and checks that the run ends
`stopped` and its output becomes the saved view; saves, restarts the server, reopens the
notebook and checks the chart is back with no widget error. Then picks a model and a
dataset in the train form and presses Train. Runs notebook 01, saves it, restarts the server
and reopens it (the pickers' and the form's saved views, no widget error); shows the kernel
indicator busy while a training cell runs. Every wait is on UI state with a deadline; a
JupyterLab dialog fails the test with a screenshot.
Skips where Debian's chromium is missing, except under CI=true, where it fails.
"""

from __future__ import annotations

import json

import nbformat
import pytest
from lab_harness import (
    ARTIFACTS,
    api,
    browser_page,
    jupyterlab,
    long_quickstart,
    open_notebook,
    require_chromium,
    run_all_cells,
    wait_all_ran,
    wait_ui,
    write_notebook,
)

from conftest import wait_for

pytestmark = pytest.mark.browser


@pytest.fixture
def lab(tmp_path):
    require_chromium()
    with jupyterlab(tmp_path) as lab:
        yield lab


def _blank(page) -> int:
    """Pixels of the dashboard's loss panel that are not white."""
    return page.evaluate("""() => {
        const c = document.querySelector(".wb-dash .wb-panel[data-panel='loss'] canvas");
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i] < 250 || d[i+1] < 250 || d[i+2] < 250) n++;
        return n;
    }""")


def _step(page) -> int:
    text = page.locator(".wb-dash .wb-step").inner_text()  # "step 12/100000"
    return int(text.split()[1].split("/")[0])


# The step counter of the dashboard, as the JS below reads it ("step 12/100000" -> 12).
_STEP_JS = "Number(document.querySelector('.wb-dash .wb-step')?.textContent.split(' ')[1]?.split('/')[0] ?? -1)"

# The chart spans its output: the grid fills the output area, the first row of panels the grid.
_SPANS = """() => {
    const d = document.querySelector('.wb-dash'), out = d?.closest('.jp-OutputArea-output');
    const grid = d?.querySelector('.wb-grid'), panels = [...(d?.querySelectorAll('.wb-panel') || [])];
    if (!out || !grid || panels.length < 2) return false;
    const row = panels.filter(p => p.offsetTop === panels[0].offsetTop).reduce((w, p) => w + p.offsetWidth, 0);
    return grid.clientWidth > 0.9 * out.clientWidth && row > 0.95 * grid.clientWidth;
}"""

_ZOOM = "document.querySelector('.wb-dash').wbChart"


def _status_is(status: str) -> str:
    return f"() => document.querySelector('.wb-dash .wb-status')?.textContent === '{status}'"


def _hover_shows_values(page) -> str:
    """Hover the loss panel until every panel's legend shows a value there (deltas redraw)."""
    page.locator(".wb-dash .wb-panel[data-panel='loss']").scroll_into_view_if_needed()
    box = page.locator(".wb-dash .wb-panel[data-panel='loss'] .u-over").bounding_box()
    for i in range(40):
        page.mouse.move(box["x"] + box["width"] * 0.6 + i % 3, box["y"] + box["height"] / 2)
        values = page.eval_on_selector_all(".wb-dash .wb-panel .u-legend .u-series:nth-child(2) .u-value",
                                           "els => els.map(e => e.textContent.trim())")
        if values and all(v not in ("", "–") for v in values):
            return values
        page.wait_for_timeout(100)  # a retry interval: a delta may have redrawn the legend
    pytest.fail(f"hovering the chart showed no values: {values}")


def _zoom_and_reset(page) -> None:
    page.locator(".wb-dash .wb-panel[data-panel='loss']").scroll_into_view_if_needed()
    box = page.locator(".wb-dash .wb-panel[data-panel='loss'] .u-over").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.3, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.6, y, steps=5)
    page.mouse.up()
    wait_ui(page, f"() => {_ZOOM}.zoom !== null && {_ZOOM}.plots.every(p => p.scales.x.min > 0)",
            "a drag to zoom every panel", 30_000)
    page.mouse.dblclick(box["x"] + box["width"] * 0.5, y)
    wait_ui(page, f"() => {_ZOOM}.zoom === null && {_ZOOM}.plots.every(p => p.scales.x.min === 0)",
            "a double-click to zoom back out", 30_000)


def test_dashboard_live_stop_and_after_a_server_restart(tmp_path):
    """Live: it draws, spans its output (and after a resize), hovers, zooms; Stop stops; the
    saved notebook, reopened after the server restarts, shows the chart, not a widget error."""
    from playwright.sync_api import sync_playwright

    require_chromium()
    notebook = long_quickstart(tmp_path)
    with jupyterlab(tmp_path) as lab, sync_playwright() as p, \
            browser_page(p, "dashboard", viewport={"width": 1300, "height": 1000}) as page:
        open_notebook(page, lab, notebook)
        run_all_cells(page, notebook)
        wait_ui(page, "() => Number(document.querySelector('.wb-dash')?.dataset.points || 0) > 2",
                "the dashboard to plot more than two points", 300_000)
        first = _step(page)
        wait_ui(page, f"(first) => {_STEP_JS} > first", f"the step counter to advance past {first}",
                120_000, arg=first)
        second = _step(page)
        assert _blank(page) > 2000, "the loss panel has drawn curves"
        wait_ui(page, _SPANS, "the live chart to span its output", 30_000)
        _hover_shows_values(page)
        _zoom_and_reset(page)
        page.locator(".wb-dash").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "browser-dashboard-running.png"))
        # the README's picture (docs/img/dashboard-live.png is a copy of this one)
        page.locator(".wb-dash").screenshot(path=str(ARTIFACTS / "dashboard-live.png"))
        page.set_viewport_size({"width": 1000, "height": 1000})
        wait_ui(page, _SPANS, "the chart to follow a narrower window", 30_000)
        page.locator(".wb-dash .wb-stop").click()
        wait_ui(page, "() => document.querySelector('.wb-dash .wb-stop')?.textContent === 'Stopping…'"
                " || document.querySelector('.wb-saved')", "Stop to read 'Stopping…'", 30_000)
        wait_ui(page, _status_is("stopped"), "the run to end 'stopped' after Stop", 180_000)
        wait_ui(page, "() => document.querySelector('.wb-saved[data-mounted] .wb-dash .wb-summary')?.textContent.includes('wall time')",
                "the output to become the saved view with the run's summary", 60_000)
        wait_ui(page, _SPANS, "the finished chart to span its output", 30_000)
        page.screenshot(path=str(ARTIFACTS / "browser-dashboard-stopped.png"))
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        wait_for(lambda: "wb-saved" in (lab["dir"] / notebook).read_text(), 60, "the notebook to be saved")
    saved = nbformat.read(tmp_path / notebook, as_version=4)
    mimes = {m for c in saved.cells if c.cell_type == "code" for o in c.outputs for m in o.get("data", {})}
    assert "application/vnd.jupyter.widget-view+json" not in mimes, "nothing in the saved notebook needs a kernel"
    summaries = list((tmp_path / "runs").glob("*/summary.json"))
    assert len(summaries) == 1
    summary = json.loads(summaries[0].read_text())
    assert summary["status"] == "stopped" and summary["step"] >= second > first
    assert (summaries[0].parent / "checkpoints" / f"checkpoint-{summary['step']}").exists()
    # the server restarted (same directories, so the same notebook-signing secret)
    with jupyterlab(tmp_path) as lab, sync_playwright() as p, \
            browser_page(p, "dashboard-reopened", viewport={"width": 1300, "height": 1000}) as page:
        open_notebook(page, lab, notebook)
        wait_ui(page, "() => document.querySelector('.wb-saved[data-mounted] .wb-dash .wb-panel canvas')"
                " || [...document.querySelectorAll('.wb-fallback img')].some(i => i.offsetWidth > 0)",
                "the reopened notebook to show the chart or its picture", 120_000)
        page.locator(".wb-saved").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "browser-dashboard-reopened.png"))
        text = page.locator(".jp-Notebook").inner_text()
        assert "Error displaying widget" not in text
        assert page.locator(".wb-saved[data-mounted] .wb-dash").count() == 1, \
            "the notebook was saved trusted: the chart is interactive again"
        assert page.locator(".wb-dash .wb-status").inner_text() == "stopped"


FORM = ["import workbench as wb\nmodel = wb.pick_model()\nmodel",
        "data = wb.pick_dataset(limit=200)\ndata",
        "form = wb.train_form(model, data)\nform"]

# What Show code prints once the kernel has the three choices made below.
PICKED = ["wb.model('gpt2')", "wb.dataset('docstrings-lm', limit=200)", "max_steps=30,"]


def test_pick_a_model_and_a_dataset_and_press_train(lab):
    import nbformat
    from playwright.sync_api import sync_playwright

    from workbench.catalog.modelspec import FAMILIES

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in FORM]
    write_notebook(nb, lab["dir"] / "form.ipynb")

    def field(page, label: str):
        """The ipywidgets control whose label reads ``label``."""
        return page.locator(".widget-inline-hbox").filter(
            has=page.locator("label.widget-label", has_text=label)).first

    with sync_playwright() as p, browser_page(p, "train-form", viewport={"width": 1300, "height": 1400}) as page:
        open_notebook(page, lab, "form.ipynb")
        run_all_cells(page, "form.ipynb")
        # a fresh cache builds the bundled data first
        wait_ui(page, "() => [...document.querySelectorAll('button')].some(b => b.textContent.trim() === 'Show code')",
                "the train form to show", 300_000)
        page.screenshot(path=str(ARTIFACTS / "browser-train-form-before.png"), full_page=True)
        field(page, "family").locator("select").select_option(label=f"gpt2: {FAMILIES['gpt2']['about']}")
        field(page, "dataset").locator("select").select_option("docstrings-lm")
        steps = field(page, "max steps").locator("input")
        steps.fill("30")
        steps.press("Enter")
        # The kernel handles widget messages in order: once Show code prints the three
        # choices, the pickers have settled and Train trains what was picked.
        page.locator("button:has-text('Show code')").click()
        wait_ui(page, "(want) => want.every(s => [...document.querySelectorAll('.jp-OutputArea pre')]"
                ".some(p => p.textContent.includes(s)))", f"Show code to print {PICKED}", 120_000, arg=PICKED)
        page.locator("button:has-text('Train')").click()
        wait_ui(page, _status_is("completed"), "the run started by Train to complete", 300_000)
        page.screenshot(path=str(ARTIFACTS / "browser-train-form.png"), full_page=True)
        # a size that needs the hub, while the hub is off (HF_HUB_OFFLINE=1 in the tests):
        # the picker says so, and the failed run says why in the form and in its dashboard
        wait_ui(page, "() => document.body.innerText.includes('completed at step 30 of 30')",
                "the form to say the run completed", 60_000)
        field(page, "size").locator("select").select_option(index=1)
        wait_ui(page, "() => document.body.innerText.includes('cannot load offline')",
                "the model picker to say the size cannot load offline", 60_000)
        # the picker's longer text has just moved the form down: a click event on the
        # button itself, not at coordinates read a moment before
        page.locator("button:has-text('Train')").dispatch_event("click")
        wait_ui(page, "() => [...document.querySelectorAll('.wb-dash .wb-error')].some(e => e.textContent.includes('HF_HUB_OFFLINE'))",
                "the failed run's dashboard to show its reason", 300_000)
        wait_ui(page, "() => document.body.innerText.includes('failed at step 0')",
                "the form to show that the run failed", 60_000)
        page.screenshot(path=str(ARTIFACTS / "browser-train-form-failed.png"), full_page=True)
    summaries = list((lab["dir"] / "runs").glob("*gpt2-tiny-docstrings-lm*/summary.json"))
    assert len(summaries) == 1, "the form trained the picked model on the picked data"
    failed = [json.loads(p.read_text()) for p in (lab["dir"] / "runs").glob("*/summary.json") if p not in summaries]
    assert [s["status"] for s in failed] == ["failed"] and "HF_HUB_OFFLINE" in failed[0]["error"]
    summary = json.loads(summaries[0].read_text())
    assert summary["status"] == "completed" and summary["step"] == 30


def test_an_attached_trainers_executed_notebook_shows_its_chart_after_a_restart(tmp_path):
    """Notebook 12 (a user's own Trainer with ``wb.attach``), executed by papermill as CI runs
    it, then opened in a JupyterLab started afterwards: the attached run's cell shows its chart
    (or, untrusted, its saved picture), never a widget error."""
    import papermill
    from playwright.sync_api import sync_playwright

    from conftest import ROOT

    require_chromium()
    notebook = "12_your_own_trainer.ipynb"
    papermill.execute_notebook(str(ROOT / "notebooks" / notebook), str(tmp_path / notebook),
                               kernel_name="python3", cwd=str(tmp_path), progress_bar=False)
    saved = nbformat.read(tmp_path / notebook, as_version=4)
    attached = [c for c in saved.cells if c.cell_type == "code" and "wb.attach(" in c.source]
    assert attached and any("image/png" in o.get("data", {}) for o in attached[0].outputs), \
        "the attached cell keeps its picture"
    with jupyterlab(tmp_path) as lab, sync_playwright() as p, \
            browser_page(p, "attached-reopened", viewport={"width": 1300, "height": 1000}) as page:
        open_notebook(page, lab, notebook)
        wait_ui(page, "() => document.querySelector('.wb-saved[data-mounted] .wb-dash .wb-panel canvas')"
                " || [...document.querySelectorAll('.wb-fallback img')].some(i => i.offsetWidth > 0)",
                "the attached run's saved chart or its picture", 120_000)
        page.locator(".wb-saved, .wb-fallback").first.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "browser-attached-reopened.png"))
        assert "Error displaying widget" not in page.locator(".jp-Notebook").inner_text()


# What a class runs first: each notebook as committed (its smoke values), Run All in JupyterLab.
# browser_page fails the test on a page or console error and on a main-thread stall over 1 s
# (up to 4 s on a busy machine: lab_harness.stall_limit_ms)
# while a dashboard is shown (issue 40: an empty log-scale loss panel froze the tab 6-8 s at
# the start of every live run, with "RangeError: Invalid array length"). 01 runs live in
# test_quickstart_saved_after_a_full_run_reopens_after_a_restart_without_a_widget_error, with
# the same checks, before it is saved and reopened.
LIVE_COURSE = ["02_text_classification", "13_gaudi_node"]


@pytest.mark.parametrize("name", LIVE_COURSE)
def test_a_course_notebook_runs_live_without_an_error_or_a_stall(tmp_path, name):
    from playwright.sync_api import sync_playwright

    from conftest import ROOT

    require_chromium()
    notebook = f"{name}.ipynb"
    write_notebook(nbformat.read(ROOT / "notebooks" / notebook, as_version=4), tmp_path / notebook)
    with jupyterlab(tmp_path) as lab, sync_playwright() as p, \
            browser_page(p, f"live-{name}", viewport={"width": 1300, "height": 1000}) as page:
        open_notebook(page, lab, notebook)
        run_all_cells(page, notebook)
        _runs_live_to_the_end(page, notebook, name)


def _runs_live_to_the_end(page, notebook: str, name: str) -> None:
    wait_ui(page, "() => document.querySelector('.wb-dash') !== null", f"{notebook}'s first dashboard", 300_000)
    wait_all_ran(page, notebook, 600_000)
    wait_ui(page, "() => { const s = [...document.querySelectorAll('.wb-dash .wb-status')];"
            " return s.length > 0 && s.every(e => e.textContent === 'completed'); }",
            f"every dashboard of {notebook} to say 'completed'", 60_000)
    page.screenshot(path=str(ARTIFACTS / f"browser-live-{name}.png"), full_page=True)
    assert "Error displaying widget" not in page.locator(".jp-Notebook").inner_text()


FAILS_AT_ONCE = """import workbench as wb

try:  # the hub is off in the tests (HF_HUB_OFFLINE=1): the model cannot load, no step is logged
    run = wb.train(wb.model("gpt2", size="small"), wb.dataset("docstrings-lm", limit=64), max_steps=5)
except Exception as e:
    print(type(e).__name__)"""


def test_a_saved_notebook_whose_run_failed_before_its_first_step_opens_without_a_stall(tmp_path):
    """Executed by papermill, opened in JupyterLab: its saved view has no step to draw, and its
    log-scale loss panel once froze the page every time the notebook was opened."""
    import papermill
    from playwright.sync_api import sync_playwright

    require_chromium()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(FAILS_AT_ONCE)]
    write_notebook(nb, tmp_path / "source.ipynb")
    notebook = "failed.ipynb"
    papermill.execute_notebook(str(tmp_path / "source.ipynb"), str(tmp_path / notebook), kernel_name="python3",
                               cwd=str(tmp_path), progress_bar=False)
    summaries = [json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*/summary.json")]
    assert [(s["status"], s.get("step", 0)) for s in summaries] == [("failed", 0)], summaries
    # trusted, as the user's own saved notebook is: signed with the secret of the server below
    # (its data dir), so its output's script draws the interactive view, not the picture
    from nbformat.sign import NotebookNotary

    executed = nbformat.read(tmp_path / notebook, as_version=4)
    (tmp_path / ".jupyter-data").mkdir(exist_ok=True)
    NotebookNotary(data_dir=str(tmp_path / ".jupyter-data")).sign(executed)
    write_notebook(executed, tmp_path / notebook)
    with jupyterlab(tmp_path) as lab, sync_playwright() as p, \
            browser_page(p, "failed-reopened", viewport={"width": 1300, "height": 1000}) as page:
        open_notebook(page, lab, notebook)
        wait_ui(page, "() => document.querySelector('.wb-saved[data-mounted] .wb-dash .wb-error')"
                "?.textContent.includes('HF_HUB_OFFLINE')", "the saved view to show why the run failed", 120_000)
        wait_ui(page, "() => document.querySelector('.wb-dash').wbChart.plots.length > 0",
                "the empty panels to draw", 30_000)
        page.screenshot(path=str(ARTIFACTS / "browser-failed-reopened.png"))
        assert page.locator(".wb-dash .wb-status").inner_text() == "failed"


def test_the_pickers_example_pasted_cell_by_cell_shows_its_widgets(lab):
    """docs/pickers.md's example, one statement a cell as its comment says: each of the three
    cells that make a widget shows it (they were empty unless the widget was the last value)."""
    import ast

    from playwright.sync_api import sync_playwright

    from conftest import ROOT

    text = (ROOT / "docs" / "pickers.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    cells = [ast.get_source_segment(code, node) for node in ast.parse(code).body]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    write_notebook(nb, lab["dir"] / "pickers.ipynb")
    with sync_playwright() as p, browser_page(p, "pickers-pasted", viewport={"width": 1300, "height": 1400}) as page:
        open_notebook(page, lab, "pickers.ipynb")
        run_all_cells(page, "pickers.ipynb")
        wait_all_ran(page, "pickers.ipynb", 300_000)
        shown = ("() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')].map(c =>"
                 " [...c.querySelectorAll('.jp-OutputArea-output')].filter(o => o.querySelector('.jupyter-widgets')"
                 " && o.offsetHeight > 40).length)")
        wait_ui(page, f"() => ({shown})().join() === '0,1,1,1,0'", "one widget in each of the three middle cells",
                60_000)
        page.screenshot(path=str(ARTIFACTS / "browser-pickers-pasted.png"), full_page=True)
        assert "Error displaying widget" not in page.locator(".jp-Notebook").inner_text()
        cut = page.eval_on_selector_all(".jp-Notebook label.widget-label",
                                        "els => els.filter(e => e.offsetWidth > 0 && e.scrollWidth > e.clientWidth)"
                                        ".map(e => e.textContent)")
        assert not cut, f"labels cut off: {cut}"
        outside = page.eval_on_selector_all(
            ".jp-Notebook .jp-OutputArea-output .widget-inline-hbox",
            "els => els.filter(e => e.offsetWidth > 0 && e.getBoundingClientRect().right >"
            " e.closest('.jp-OutputArea-output').getBoundingClientRect().right + 1).map(e => e.textContent.trim())")
        assert not outside, f"controls past the output's right edge: {outside}"


def _saved_widget_views(path) -> int:
    saved = nbformat.read(path, as_version=4)
    return sum("application/vnd.jupyter.widget-view+json" in o.get("data", {})
               for c in saved.cells if c.cell_type == "code" for o in c.outputs)


def _reopened_shows_the_finished_run(page, lab, notebook, status) -> None:
    open_notebook(page, lab, notebook)
    wait_ui(page, "() => document.querySelector('.wb-saved[data-mounted] .wb-dash .wb-panel canvas')"
            " || [...document.querySelectorAll('.wb-fallback img')].some(i => i.offsetWidth > 0)"
            " || document.body.innerText.includes('Error displaying widget')",
            "the reopened notebook to show the finished chart or its picture", 120_000)
    assert "Error displaying widget" not in page.locator(".jp-Notebook").inner_text()
    assert page.locator(".wb-saved .wb-dash .wb-status").first.inner_text() == status


def test_a_notebook_saved_mid_run_and_reopened_after_the_run_ends_shows_the_finished_chart(tmp_path):
    """Saved while the run trains (JupyterLab autosaves), closed, reopened once the run has
    ended: on the same server (the kernel lives on) and after a restart (a new kernel). The
    saved output then held a widget whose model no kernel had: "Error displaying widget"."""
    from playwright.sync_api import sync_playwright

    require_chromium()
    notebook = long_quickstart(tmp_path)
    with jupyterlab(tmp_path) as lab, sync_playwright() as p:
        with browser_page(p, "saved-mid-run", viewport={"width": 1300, "height": 1000}) as page:
            open_notebook(page, lab, notebook)
            run_all_cells(page, notebook)
            wait_ui(page, "() => Number(document.querySelector('.wb-dash')?.dataset.points || 0) > 2",
                    "the dashboard to plot more than two points", 300_000)
            page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
            wait_for(lambda: _saved_widget_views(tmp_path / notebook) == 1, 60, "the notebook saved mid-run")
        # the page is closed; the run ends as Stop ends it (an interrupt), with no page open
        (kernel,) = [s["kernel"]["id"] for s in api(lab, "/api/sessions") if s["path"] == notebook]
        api(lab, f"/api/kernels/{kernel}/interrupt", {})
        wait_for(lambda: [json.loads(p.read_text()).get("status") for p in (tmp_path / "runs").glob("*/summary.json")]
                 == ["stopped"], 180, "the run to stop")
        wait_for(lambda: api(lab, f"/api/kernels/{kernel}")["execution_state"] == "idle", 120, "the kernel to idle")
        assert _saved_widget_views(tmp_path / notebook) == 1, "the file still holds the live widget"
        with browser_page(p, "saved-mid-run-reopened", viewport={"width": 1300, "height": 1000}) as page:
            _reopened_shows_the_finished_run(page, lab, notebook, "stopped")
            page.screenshot(path=str(ARTIFACTS / "browser-saved-mid-run-reopened.png"))
    with jupyterlab(tmp_path) as lab, sync_playwright() as p, \
            browser_page(p, "saved-mid-run-restarted", viewport={"width": 1300, "height": 1000}) as page:
        _reopened_shows_the_finished_run(page, lab, notebook, "stopped")


# The kernel's state as JupyterLab shows it (the notebook's session: the status bar's kernel
# item and the toolbar's indicator read it), every change of it and every control-channel
# request the page sends, recorded from the moment the hook is installed.
_WATCH_KERNEL = """() => {
    const sc = window.jupyterapp.shell.currentWidget.sessionContext, k = sc.session.kernel;
    window.__wbKernel = {states: [], control: []};
    sc.statusChanged.connect(() => window.__wbKernel.states.push(sc.kernelDisplayStatus));
    k.anyMessage.connect((_, a) => {
        if (a.direction === 'send' && a.msg.channel === 'control') window.__wbKernel.control.push(a.msg.header.msg_type);
    });
    return true;
}"""


def test_the_kernel_indicator_reads_busy_while_a_training_cell_runs(lab):
    """A blocking wb.train cell: JupyterLab's kernel indicator and the server say busy until it
    ends. The dashboard's comm made JupyterLab ask the kernel for a subshell; the kernel's idle
    after that control request read as the kernel's state (workbench/server/kernelstate.py)."""
    from playwright.sync_api import sync_playwright

    notebook = long_quickstart(lab["dir"])
    with sync_playwright() as p, browser_page(p, "kernel-busy", viewport={"width": 1300, "height": 1000}) as page:
        open_notebook(page, lab, notebook)
        page.evaluate(_WATCH_KERNEL)
        run_all_cells(page, notebook)
        # the training cell runs: its dashboard plots, past the moment its comm opened
        wait_ui(page, "() => Number(document.querySelector('.wb-dash')?.dataset.points || 0) > 2",
                "the dashboard to plot more than two points", 300_000)
        start = page.evaluate(f"() => {_STEP_JS}")
        seen = page.evaluate("() => window.__wbKernel.states.length")
        wait_ui(page, f"() => {_STEP_JS} >= {start + 3}", "three more steps", 120_000)
        kernel = page.evaluate("() => window.__wbKernel")
        status = page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.kernelDisplayStatus")
        shown = page.locator(".jp-Notebook-ExecutionIndicator").first.get_attribute("data-status")
        (kid,) = [s["kernel"]["id"] for s in api(lab, "/api/sessions") if s["path"] == notebook]
        server = api(lab, f"/api/kernels/{kid}")["execution_state"]
        api(lab, f"/api/kernels/{kid}/interrupt", {})  # Stop: the run ends, the cell with it
        wait_all_ran(page, notebook, 180_000)
    assert (status, shown, server) == ("busy", "busy", "busy"), \
        f"while the cell trained: JupyterLab {status}, its toolbar {shown}, the server {server}; {kernel}"
    assert set(kernel["states"][seen:]) <= {"busy"}, f"the state changed while the cell trained: {kernel}"
    # the case this is for: the page asked the kernel for a subshell while the cell ran
    assert "create_subshell_request" in kernel["control"], kernel


# The outputs of the current notebook: how many are saved views of the pickers and the form,
# how many still widgets, and the notebook's dirty flag.
_OUTPUTS = """() => {
    const m = window.jupyterapp.shell.currentWidget.content.model;
    const outs = [...m.cells].filter(c => c.type === 'code').flatMap(c => c.outputs.toJSON());
    const saved = outs.filter(o => (o.data?.['text/html'] ?? '').includes("class='wb-widget-saved'"));
    return {saved: saved.length, widgets: saved.filter(o => o.data['application/vnd.jupyter.widget-view+json']).length,
            dirty: m.dirty};
}"""


def test_quickstart_saved_after_a_full_run_reopens_after_a_restart_without_a_widget_error(tmp_path):
    """Notebook 01 (its smoke values) run live in JupyterLab as a class runs it first (no page
    error, no stall, every dashboard completed), saved, the server restarted: the model
    picker, the data picker and the training form show their saved views (the form's with its
    run's chart), trusted and untrusted; no "Error displaying widget", no console error, and
    the notebook opens clean."""
    from playwright.sync_api import sync_playwright

    from conftest import ROOT

    require_chromium()
    notebook = "01_quickstart.ipynb"
    write_notebook(nbformat.read(ROOT / "notebooks" / notebook, as_version=4), tmp_path / notebook)
    with jupyterlab(tmp_path) as lab, sync_playwright() as p, \
            browser_page(p, "live-01_quickstart", viewport={"width": 1300, "height": 1000}) as page:
        open_notebook(page, lab, notebook)
        run_all_cells(page, notebook)
        _runs_live_to_the_end(page, notebook, "01_quickstart")
        # the form's saved view has its run's chart once the run has ended (its cell waits for it)
        wait_ui(page, f"() => {{ const o = ({_OUTPUTS})(); return o.saved === 3 && o.widgets === 3; }}",
                "the pickers and the form to carry their saved views", 60_000)
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        wait_for(lambda: sum("class='wb-widget-saved'><div" in o.get("data", {}).get("text/html", "") and
                             "class='wb-saved'" in o["data"]["text/html"]
                             for c in nbformat.read(tmp_path / notebook, as_version=4).cells if c.cell_type == "code"
                             for o in c.outputs) == 1, 60, "the notebook saved with the form's run chart")
    saved = nbformat.read(tmp_path / notebook, as_version=4)
    untrusted = "01_untrusted.ipynb"  # the same outputs, its signature no longer matching
    saved.metadata["edited_elsewhere"] = True
    nbformat.write(saved, tmp_path / untrusted)
    with jupyterlab(tmp_path) as lab, sync_playwright() as p:
        for name in (notebook, untrusted):
            with browser_page(p, f"reopened-{name}", viewport={"width": 1300, "height": 1000}) as page:
                _reopened_shows_the_saved_views(page, lab, name)


def _reopened_shows_the_saved_views(page, lab, name) -> None:
    here = "window.jupyterapp.shell.currentWidget.node"
    open_notebook(page, lab, name, alone=True)
    wait_ui(page, f"() => {here}.querySelectorAll('.wb-widget-saved').length === 3"
            f" || {here}.innerText.includes('Error displaying widget')",
            f"{name}: the pickers' and the form's saved views", 120_000)
    wait_ui(page, f"() => {here}.querySelector('.wb-widget-saved .wb-saved')", f"{name}: the form's run chart", 60_000)
    outputs = page.evaluate(_OUTPUTS)
    page.screenshot(path=str(ARTIFACTS / f"browser-reopened-{name.split('.')[0]}.png"))
    assert "Error displaying widget" not in page.evaluate(f"() => {here}.innerText")
    assert outputs == {"saved": 3, "widgets": 0, "dirty": False}, outputs
    assert "batch size" in page.evaluate(f"() => {here}.querySelector('.wb-widget-saved').innerText")
