"""A real JupyterLab in a real headless Chromium: the live dashboard draws, Stop works, the form trains.

Starts JupyterLab on 127.0.0.1 with token auth (tests/lab_harness.py), opens the quickstart
notebook (its parameters made long enough to press Stop), runs it, checks that the canvas has
drawn pixels and the step counter advances, clicks Stop and checks that the run ends
`stopped`; then picks a model and a dataset in the train form and presses Train. Every wait
is on UI state with a deadline; a JupyterLab dialog fails the test with a screenshot.
Skips where Debian's chromium is missing, except under CI=true, where it fails.
"""

from __future__ import annotations

import json

import pytest
from lab_harness import (
    ARTIFACTS,
    ROOT,
    browser_page,
    jupyterlab,
    open_notebook,
    require_chromium,
    run_all_cells,
    wait_ui,
    write_notebook,
)

pytestmark = pytest.mark.browser


@pytest.fixture
def lab(tmp_path):
    require_chromium()
    with jupyterlab(tmp_path) as lab:
        yield lab


def _quickstart(workdir) -> str:
    """The quickstart with parameters for a run long enough to stop (papermill's injection)."""
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    nb = load_notebook_node(str(ROOT / "notebooks" / "01_quickstart.ipynb"))
    nb = parameterize_notebook(nb, {"MAX_STEPS": 100000, "BATCH_SIZE": 4})
    write_notebook(nb, workdir / "01_quickstart.ipynb")
    return "01_quickstart.ipynb"


def _blank(page) -> int:
    """Pixels of the dashboard canvas that are not white."""
    return page.evaluate("""() => {
        const c = document.querySelector('.wb-dash canvas');
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


def _status_is(status: str) -> str:
    return f"() => document.querySelector('.wb-dash .wb-status')?.textContent === '{status}'"


def test_dashboard_draws_live_and_stop_works(lab):
    from playwright.sync_api import sync_playwright

    notebook = _quickstart(lab["dir"])
    with sync_playwright() as p, browser_page(p, "dashboard", viewport={"width": 1300, "height": 1000}) as page:
        open_notebook(page, lab, notebook)
        run_all_cells(page, notebook)
        wait_ui(page, "() => Number(document.querySelector('.wb-dash canvas')?.dataset.points || 0) > 2",
                "the dashboard canvas to plot more than two points", 300_000)
        first = _step(page)
        wait_ui(page, f"(first) => {_STEP_JS} > first", f"the step counter to advance past {first}",
                120_000, arg=first)
        second = _step(page)
        assert _blank(page) > 2000, "the canvas has drawn curves"
        page.screenshot(path=str(ARTIFACTS / "browser-dashboard-running.png"))
        page.locator(".wb-dash .wb-stop").click()
        wait_ui(page, _status_is("stopped"), "the run to end 'stopped' after Stop", 180_000)
        page.screenshot(path=str(ARTIFACTS / "browser-dashboard-stopped.png"))
    summaries = list((lab["dir"] / "runs").glob("*/summary.json"))
    assert len(summaries) == 1
    summary = json.loads(summaries[0].read_text())
    assert summary["status"] == "stopped" and summary["step"] >= second > first
    assert (summaries[0].parent / "checkpoints" / f"checkpoint-{summary['step']}").exists()


FORM = ["import workbench as wb\nmodel = wb.pick_model()\nmodel",
        "data = wb.pick_dataset(limit=200)\ndata",
        "form = wb.train_form(model, data)\nform"]

# What Show code prints once the kernel has the three choices made below.
PICKED = ["wb.model('gpt2')", "wb.dataset('docstrings-lm', limit=200)", "max_steps=30,"]


def test_pick_a_model_and_a_dataset_and_press_train(lab):
    import nbformat
    from playwright.sync_api import sync_playwright

    from workbench.catalog import FAMILIES

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
    summaries = list((lab["dir"] / "runs").glob("*gpt2-tiny-docstrings-lm*/summary.json"))
    assert len(summaries) == 1, "the form trained the picked model on the picked data"
    summary = json.loads(summaries[0].read_text())
    assert summary["status"] == "completed" and summary["step"] == 30
