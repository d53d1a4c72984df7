"""What the Workbench panel costs the Jupyter server: its CPU with the panel open and idle.

Issue #17 asks the extension to cost nothing when unused. This starts one JupyterLab (the
test harness: its own directories, token auth) on a root holding ``--runs`` finished runs of
``--events`` events each, opens it in headless Chromium, and measures the server process's
CPU time (user + system, psutil) over windows of ``--seconds``, in three conditions taken in
turn, ``--rounds`` times:

- ``no page``: the server with no browser connected;
- ``panel closed``: JupyterLab open on the file browser (the status-bar item polls runs
  every 15 s while nothing trains);
- ``panel open``: the Workbench panel visible (devices and runs polled once a second).

It prints the median CPU % (of one core) of each, the panel's cost (open minus closed, in
points of one core) and the ratio open / closed, and writes them as JSON with ``--json``.

    .venv/bin/python scripts/bench_panel.py --runs 20 --events 2000 --seconds 30 --rounds 3
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def make_runs(root: Path, n: int, events: int) -> None:
    """``n`` finished runs with ``events`` train events each, as the engine writes them."""
    from workbench.rundir.run import EventLog, write_json

    for i in range(n):
        path = root / "runs" / f"20261201-{i:06d}-gpt2-tiny"
        path.mkdir(parents=True)
        write_json(path / "spec.json", {"model": {"family": "gpt2", "size": "tiny", "task": "causal_lm"},
                                        "data": {"source": "tinystories"}, "args": {}})
        log = EventLog(path / "events.jsonl")
        log.emit({"phase": "start", "step": 0, "max_steps": events, "device": "cpu", "mem_total": 8 << 30})
        for s in range(1, events + 1):
            log.emit({"step": s, "phase": "train", "loss": 3.0 / s ** 0.3, "tokens_per_s": 4000.0,
                      "samples_per_s": 30.0, "mem_alloc": 1 << 30, "time": s * 0.1})
        write_json(path / "summary.json", {"status": "completed", "ended": True, "step": events,
                                           "max_steps": events, "device": {"kind": "cpu"}})


def cpu_seconds(proc) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def window(proc, seconds: float, page=None) -> float:
    """The server's CPU % over ``seconds`` of wall time (the page keeps running meanwhile)."""
    c0, t0 = cpu_seconds(proc), time.perf_counter()
    end = t0 + seconds
    while (left := end - time.perf_counter()) > 0:
        if page is not None:
            page.wait_for_timeout(min(left, 1.0) * 1000)  # lets the page run its polls
        else:
            time.sleep(min(left, 1.0))
    return 100 * (cpu_seconds(proc) - c0) / (time.perf_counter() - t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)

    import psutil
    from lab_harness import browser_page, jupyterlab, wait_ui
    from playwright.sync_api import sync_playwright

    out: dict[str, list[float]] = {"no page": [], "panel closed": [], "panel open": []}
    # What the page asked the server extension for in each window, per endpoint: tells a
    # change in what one request costs from a change in how often the page asks.
    asked: dict[str, collections.Counter] = {k: collections.Counter() for k in out}
    urls: list[str] = []

    def count(condition: str, since: int) -> None:
        for u in urls[since:]:
            if "/workbench/" in u:
                asked[condition][u.split("/workbench/", 1)[1].split("?")[0]] += 1
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        make_runs(workdir, a.runs, a.events)
        with jupyterlab(workdir) as lab, sync_playwright() as p, browser_page(p, "bench-panel") as page:
            server = psutil.Process(lab["pid"])
            page.on("request", lambda r: urls.append(r.url))
            for _ in range(a.rounds):
                page.goto("about:blank")
                out["no page"].append(window(server, a.seconds))
                page.goto(f"{lab['url']}/lab?token={lab['token']}")
                wait_ui(page, "() => document.querySelector('.wbp-status-item')", "the status-bar item", 240_000)
                panel_shown = "() => document.querySelector('#gaudi-workbench-panel')?.offsetWidth > 0"
                if page.evaluate(panel_shown):  # the layout restorer reopened it: show the file browser
                    page.evaluate("() => window.jupyterapp.commands.execute('filebrowser:activate')")
                window(server, 5, page)  # the page's start-up requests are not the panel's
                since = len(urls)
                out["panel closed"].append(window(server, a.seconds, page))
                count("panel closed", since)
                page.locator(".wbp-status-item").click()
                wait_ui(page, panel_shown, "the panel to open", 30_000)
                wait_ui(page, f"() => document.querySelectorAll('#gaudi-workbench-panel .wbp-run').length === {a.runs}",
                        "the panel to list the runs", 60_000)
                since = len(urls)
                out["panel open"].append(window(server, a.seconds, page))
                count("panel open", since)
                page.evaluate("() => window.jupyterapp.commands.execute('filebrowser:activate')")
    med = {k: statistics.median(v) for k, v in out.items()}
    result = {"command": "scripts/bench_panel.py " + " ".join(argv or sys.argv[1:]),
              "cpu_pct": {k: round(v, 3) for k, v in med.items()},
              "cpu_pct_rounds": {k: [round(x, 3) for x in v] for k, v in out.items()},
              # the panel's own cost: open against closed, same page, same server, same minute
              "ratios": {"panel_open_vs_closed": (round(med["panel open"] / med["panel closed"], 2)
                                                  if med["panel closed"] > 0 else None)},
              "panel_open_minus_closed_pct": round(med["panel open"] - med["panel closed"], 3),
              "requests_per_s": {k: {e: round(n / (a.seconds * a.rounds), 3) for e, n in c.items()}
                                 for k, c in asked.items()},
              "runs": a.runs, "events_per_run": a.events, "seconds": a.seconds, "rounds": a.rounds}
    print(json.dumps(result, indent=2))
    if a.json:
        a.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
