"""The JupyterLab extension in a real JupyterLab and a real headless Chromium.

The Workbench panel in the left sidebar: the CPU device card with a sparkline that moves;
a training run started in a notebook appears as running with a rising step; the status bar
shows its step; hiding the panel stops the device polling; Stop in the panel ends the run
`stopped` with a checkpoint; Insert code and Summary work on it. Every wait is on UI state
with a deadline (tests/lab_harness.py); screenshots go to test-artifacts/.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from lab_harness import (
    ARTIFACTS,
    browser_page,
    jupyterlab,
    long_quickstart,
    open_notebook,
    require_chromium,
    run_all_cells,
    wait_ui,
    write_notebook,
)

from conftest import FAKES

pytestmark = pytest.mark.browser

PANEL = "#gaudi-workbench-panel"
CPU_SPARK = f"{PANEL} .wbp-device[data-kind='cpu'] svg.wbp-util polyline"
RUNNING = f"{PANEL} .wbp-run[data-status='running']"

# The number in the running run's "step N/M".
_RUN_STEP_JS = (f"Number(document.querySelector(\"{RUNNING} .wbp-step\")?.textContent"
                ".match(/step (\\d+)/)?.[1] ?? -1)")


# a real error's length: its first line, then the rest of the message (600 characters in all)
CRASH = ("RuntimeError: CUDA error: device-side assert triggered\n"
         + "CUDA kernel errors might be asynchronously reported at some other API call. " * 7)[:600]


def _crashed_run(root, make_run) -> str:
    """A run that died with an error, as the writer leaves it (an old timestamp: listed last)."""
    path = make_run(root / "runs", "20200101-000000-gpt2-tiny-crashed", args={"max_steps": 50},
                    summary={"status": "failed", "ended": True, "step": 7, "max_steps": 50,
                             "error": CRASH})
    return f"runs/{path.name}"


def _points(page) -> str:
    return page.get_attribute(CPU_SPARK, "points") or ""


def test_panel_shows_devices_and_runs_and_stops_a_run(tmp_path, make_run):
    from playwright.sync_api import sync_playwright

    require_chromium()
    notebook = long_quickstart(tmp_path)
    crashed = _crashed_run(tmp_path, make_run)
    requests: list[str] = []
    with jupyterlab(tmp_path) as lab, sync_playwright() as p, \
            browser_page(p, "panel", viewport={"width": 1400, "height": 950}) as page:
        page.on("request", lambda r: requests.append(r.url))
        open_notebook(page, lab, notebook)

        # The status-bar item is there before anything trains; a click opens the panel.
        wait_ui(page, "() => document.querySelector('.wbp-status-item')?.textContent === 'Workbench: idle'",
                "the status-bar item to say idle", 60_000)
        page.locator(".wbp-status-item").click()
        wait_ui(page, f"() => document.querySelector('{PANEL}')?.offsetWidth > 0",
                "a click on the status-bar item to open the panel", 30_000)

        # The CPU card fills in and its utilisation sparkline moves from poll to poll.
        wait_ui(page, f"""() => (document.querySelector("{CPU_SPARK}")?.getAttribute('points') || '')
                    .split(' ').length >= 3""", "the CPU sparkline to have three points", 60_000)
        before = _points(page)
        wait_ui(page, f"""(b) => document.querySelector("{CPU_SPARK}").getAttribute('points') !== b""",
                "the CPU sparkline to move", 30_000, arg=before)
        card = page.locator(f"{PANEL} .wbp-device[data-kind='cpu']").inner_text()
        assert re.search(r"\d+%", card) and "GiB" in card, card
        notes = page.locator(f"{PANEL} .wbp-note").all_inner_texts()
        assert any(n.startswith("Intel Gaudi:") and ("pyhlml" in n or "HLML" in n) for n in notes), notes

        # A crashed run shows its error.
        failed = f"{PANEL} .wbp-run[data-path='{crashed}']"
        wait_ui(page, f"() => document.querySelector(\"{failed}\")?.dataset.status === 'failed'",
                "the crashed run to be listed as failed", 60_000)
        # its first line, the whole on hover (not 600 characters in a card)
        error = page.locator(f"{failed} .wbp-run-error")
        assert error.inner_text() == "RuntimeError: CUDA error: device-side assert triggered …"
        assert error.get_attribute("title") == CRASH
        assert page.locator(f"{failed} .wbp-stop").is_hidden(), "an ended run has no Stop button"

        # A run started in the notebook shows up as running, its step rising.
        run_all_cells(page, notebook)
        wait_ui(page, f"() => {_RUN_STEP_JS} > 0", "the run to appear in the panel as running", 300_000)
        first = page.evaluate(_RUN_STEP_JS)
        wait_ui(page, f"(first) => {_RUN_STEP_JS} > first", f"the panel's step to rise past {first}",
                120_000, arg=first)
        wait_ui(page, "() => /step \\d+\\/100000/.test(document.querySelector('.wbp-status-item').textContent)",
                "the status bar to show the run's step", 30_000)
        status_text = page.locator(".wbp-status-item").inner_text()
        assert "ETA" in status_text, status_text
        wait_ui(page, f"""() => document.querySelector("{RUNNING} .wbp-loss-spark polyline")
                    ?.getAttribute('points')?.split(' ').length >= 2""", "the run's loss sparkline", 60_000)
        page.locator(PANEL).screenshot(path=str(ARTIFACTS / "panel-live.png"))
        page.screenshot(path=str(ARTIFACTS / "browser-panel-running.png"))  # docs/img/panel-live.png is a copy

        # Hidden, the panel stops reading devices; the runs poll (status bar) goes on.
        tab = page.locator(f".jp-SideBar .lm-TabBar-tab[data-id='{PANEL[1:]}']")
        tab.click()
        wait_ui(page, f"() => !(document.querySelector('{PANEL}')?.offsetWidth > 0)", "the panel to hide", 30_000)
        devices_then = sum("/workbench/devices" in u for u in requests)
        cards_then = sum("/workbench/cards" in u for u in requests)
        # The cards (who holds each) come with every fifth reading (CARDS_EVERY), not each.
        assert 1 <= cards_then <= devices_then // 5 + 2, (cards_then, devices_then)
        runs_then = sum("/workbench/runs" in u for u in requests)
        for _ in range(600):  # until three more runs polls (2 s apart while training), at most ~60 s
            if sum("/workbench/runs" in u for u in requests) >= runs_then + 3:
                break
            page.wait_for_timeout(100)  # lets Playwright deliver the page's request events
        assert sum("/workbench/runs" in u for u in requests) >= runs_then + 3, "the status bar keeps polling runs"
        assert sum("/workbench/devices" in u for u in requests) == devices_then, "a hidden panel reads no devices"
        tab.click()
        wait_ui(page, f"() => document.querySelector('{PANEL}')?.offsetWidth > 0", "the panel to show again", 30_000)

        # Stop from the panel: the run ends stopped, with a checkpoint.
        page.locator(f"{RUNNING} .wbp-stop").click()
        wait_ui(page, f"() => document.querySelector('{PANEL} .wbp-run')?.dataset.status === 'stopped'",
                "the run to end 'stopped' after Stop in the panel", 180_000)
        wait_ui(page, "() => document.querySelector('.wbp-status-item').textContent === 'Workbench: idle'",
                "the status bar to say idle again", 60_000)
        page.locator(PANEL).screenshot(path=str(ARTIFACTS / "panel-stopped.png"))

        # Insert code puts wb.Run.open(<the run, relative to the notebook>) into the notebook.
        page.locator(f"{PANEL} .wbp-run .wbp-insert").first.click()
        wait_ui(page, """() => window.jupyterapp.shell.currentWidget.content.widgets
                    .some(c => /wb\\.Run\\.open\\("runs\\/[^"]+"\\)/.test(c.model.sharedModel.getSource()))""",
                "Insert code to add wb.Run.open(...) to the notebook", 30_000)
        # Tick both runs: Compare selected inserts wb.compare of the two.
        page.locator(f"{PANEL} .wbp-run .wbp-select").first.check()
        page.locator(f"{failed} .wbp-select").check()
        page.locator(f"{PANEL} .wbp-compare").click()
        wait_ui(page, r"""() => window.jupyterapp.shell.currentWidget.content.widgets
                    .some(c => /wb\.compare\("runs\/[^"]+", "runs\/20200101-000000-gpt2-tiny-crashed"\)/
                               .test(c.model.sharedModel.getSource()))""",
                "Compare selected to add wb.compare(...) of both runs", 30_000)
        # Summary opens the run in the main area, with its status and checkpoint.
        page.locator(f"{PANEL} .wbp-run .wbp-summary").first.click()
        wait_ui(page, "() => /checkpoint-\\d+/.test(document.querySelector('.wbp-summary-view')?.textContent || '')",
                "the summary view to list the checkpoint", 60_000)
        page.screenshot(path=str(ARTIFACTS / "browser-panel-summary.png"))

    runs = [p for p in (tmp_path / "runs").glob("*/summary.json") if p.parent.name != crashed.split("/")[1]]
    assert len(runs) == 1
    summary = json.loads(runs[0].read_text())
    assert summary["status"] == "stopped" and summary["step"] > first
    assert (runs[0].parent / "checkpoints" / f"checkpoint-{summary['step']}").exists()


def test_panel_names_the_kernel_that_holds_a_card_and_shutting_it_down_frees_it(tmp_path,
                                                                                 monkeypatch):
    """On the emulated Gaudi node (tests/fakes): a notebook's kernel takes a card; the panel's
    Cards list names that notebook with a Shut down kernel button; after the confirmation the
    kernel is shut down and the card reads free."""
    import nbformat
    from playwright.sync_api import sync_playwright

    require_chromium()
    dev_dir = tmp_path / "accel"
    dev_dir.mkdir()
    paths = [str(FAKES), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    for name, value in (("FAKE_HPU_DEV_DIR", str(dev_dir)), ("FAKE_HPU_COUNT", "2"),
                        ("WORKBENCH_HPU_DEVICE_FILES", str(dev_dir / "accel*")),
                        ("PT_HPU_LAZY_MODE", "0")):
        monkeypatch.setenv(name, value)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import workbench as wb\nwb.device('hpu').memory()  # takes a card, as training does\n"
        "print(wb.device('hpu').holding)")])
    write_notebook(nb, tmp_path / "holder.ipynb")
    card0 = f"{PANEL} .wbp-card[data-kind='hpu'][data-index='0']"
    with jupyterlab(tmp_path) as lab, sync_playwright() as p, \
            browser_page(p, "cards", viewport={"width": 1400, "height": 950}) as page:
        open_notebook(page, lab, "holder.ipynb")
        run_all_cells(page, "holder.ipynb")
        page.locator(".wbp-status-item").click()
        wait_ui(page, f"""() => /held by pid \\d+ \\(\\w+\\), kernel of holder.ipynb/
                    .test(document.querySelector("{card0}")?.textContent || '')""",
                "card 0 to be held by the kernel of holder.ipynb", 240_000)
        assert page.locator(f"{PANEL} .wbp-card[data-index='1']").get_attribute("data-free") == "true"
        page.locator(PANEL).screenshot(path=str(ARTIFACTS / "panel-cards.png"))
        page.locator(f"{card0} .wbp-card-shutdown").click()
        page.locator(".jp-Dialog").wait_for(timeout=30_000)  # the confirmation comes first
        assert "holds Gaudi 0 (module 0)" in page.locator(".jp-Dialog").inner_text()
        page.locator(".jp-Dialog .jp-mod-accept").click()
        page.locator(".jp-Dialog").wait_for(state="detached", timeout=30_000)
        wait_ui(page, f"() => document.querySelector(\"{card0}\")?.dataset.free === 'true'",
                "card 0 to read free once its kernel is shut down", 120_000)


def test_the_panels_throughput_is_a_finished_runs_own_and_a_running_runs_last_measured(tmp_path, make_run):
    """A finished run showed "0 samples/s": its last event, logged after an evaluation, had
    no throughput. Now an ended run shows the throughput its summary reports, and an event
    without one keeps the last measured."""
    from workbench.server.runs import RunTable

    path = make_run(tmp_path / "runs", "20260101-000000-bert-tiny-done",
                    summary={"status": "completed", "ended": True, "step": 3, "samples_per_s": 31.0})
    events = [{"phase": "start", "step": 0, "max_steps": 3},
              {"phase": "train", "step": 1, "loss": 2.0, "samples_per_s": 30.0, "time": 1.0},
              {"phase": "eval", "step": 2, "eval_loss": 2.1, "time": 2.0},
              {"phase": "train", "step": 3, "loss": 1.9, "samples_per_s": 0.0, "tokens_per_s": None, "time": 3.0}]
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (row,) = RunTable(tmp_path).rows()
    assert row["samples_per_s"] == 31.0 and row["status"] == "completed"
    from workbench.server.tail import EventTail

    tail = EventTail(path / "events.jsonl")
    tail.poll()
    assert tail.samples_per_s == 30.0, "the last measured, not the empty interval's 0"


def test_the_status_bar_shows_a_run_that_starts_while_the_panel_is_closed(tmp_path):
    """With the panel closed the runs were polled every 15 s: a run that trained for less than
    that was never shown, and the status bar said "idle" while it trained. While a notebook's
    kernel executes, the runs are polled every 2 s; then the status bar shows the run."""
    import time

    from playwright.sync_api import sync_playwright

    require_chromium()
    notebook = long_quickstart(tmp_path)
    with jupyterlab(tmp_path) as lab, sync_playwright() as p, \
            browser_page(p, "status-bar-closed-panel", viewport={"width": 1300, "height": 900}) as page:
        polls = []
        page.on("request", lambda r: "/workbench/runs" in r.url and polls.append(time.monotonic()))
        open_notebook(page, lab, notebook)
        wait_ui(page, "() => document.querySelector('.wbp-status-item')?.textContent === 'Workbench: idle'",
                "the status bar to say idle", 60_000)
        run_all_cells(page, notebook)
        wait_ui(page, "() => window.jupyterapp.shell.currentWidget.sessionContext.kernelDisplayStatus === 'busy'",
                "the kernel to execute", 60_000)
        busy = time.monotonic()
        page.wait_for_timeout(6500)  # a window to count requests in, not a wait for state
        during = [t for t in polls if busy <= t <= busy + 6.5]
        assert len(during) >= 2, f"{len(during)} runs polls in the first 6.5 s of a busy kernel"
        wait_ui(page, "() => /step \\d+\\/100000/.test(document.querySelector('.wbp-status-item').textContent)",
                "the status bar to show the run's step", 60_000)
        page.locator(".wb-dash .wb-stop").click()
        wait_ui(page, "() => document.querySelector('.wb-dash .wb-status')?.textContent === 'stopped'",
                "the run to stop", 180_000)
