"""The dashboard's redraw cost in headless Chromium: the uPlot view beside the hand-written one.

Why this exists: issue #21 asked to keep the hand-written canvas view only if it measured
better than a charting library on what matters here. This times both side by side in one
browser: a full redraw (the history handler: data rebuilt, every panel drawn) of 2 runs x
2,000 points x the panels' series (8 per run at least), `--repeats` times each, and reports
the medians, their ratio and both bundle sizes. The hand-written view is read from git
(`--old`, the last commit that had it), so this runs in a clone only.

    .venv/bin/python scripts/bench_view.py --old 15ddc09 --repeats 40
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HARNESS = """
<html><body><div id="host" style="width:1200px"></div>
<script type="module">
const mod = await import(%(module)s);
const state = %(state)s;
const handlers = {};
const model = { get: (k) => state[k], on: (ev, f) => { handlers[ev] = f; }, set() {}, save_changes() {}, send() {} };
window.requestAnimationFrame = (f) => f();  // draw at once, so the time is the draw's
mod.default.render({ model, el: document.getElementById("host") });
const times = [];
for (let i = 0; i < %(repeats)d; i++) {
  const t0 = performance.now();
  handlers["change:history"]();
  times.push(performance.now() - t0);
}
window.result = times;
</script></body></html>
"""


def _state(points: int) -> dict:
    from workbench.views.chart import chart_spec, history, marks

    def events(shift):
        out = []
        for s in range(1, points + 1):
            out.append({"step": s, "phase": "train", "loss": 3 * math.exp(-s / 900) + 0.1 * math.sin(s + shift),
                        "lr": 1e-3, "grad_norm": 1 + math.sin(s / 30), "tokens_per_s": 4000 + s % 50,
                        "samples_per_s": 30.0, "mem_alloc": 1e9, "mem_peak": 2e9, "compiles": 3 + s // 400,
                        "time": s * 0.1})
            if s % 100 == 0:
                out.append({"step": s, "phase": "eval", "eval_loss": 3 * math.exp(-s / 900), "time": s * 0.1})
        return out

    runs = {"a": events(0), "b": events(1)}
    return {"title": "bench", "current": "a", "status": "completed", "max_steps": points, "warmup_steps": 10,
            "device": "cpu", "mem_total": 8e9, "stoppable": False, "log_scale": True, "blocking": False,
            "kernel_id": "", "chart": chart_spec({n: marks(e) for n, e in runs.items()}, 8e9, 10),
            "summary": {}, "history": {n: history(e) for n, e in runs.items()}}


def _time(page, module: Path, state: dict, repeats: int) -> list[float]:
    html = HARNESS % {"module": json.dumps(module.as_uri()), "state": json.dumps(state), "repeats": repeats}
    path = module.with_suffix(".html")
    path.write_text(html)
    page.goto(path.as_uri())
    page.wait_for_function("() => window.result", timeout=300_000)
    return page.evaluate("() => window.result")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default="15ddc09", help="a commit with workbench/assets/dashboard.js (hand-written)")
    ap.add_argument("--points", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=40)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    state = _state(args.points)
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old.mjs"
        old.write_text(subprocess.run(["git", "show", f"{args.old}:workbench/assets/dashboard.js"], cwd=ROOT,
                                      capture_output=True, text=True, check=True).stdout)
        new = Path(tmp) / "new.mjs"
        new.write_text((ROOT / "workbench" / "assets" / "build" / "dashboard.js").read_text())
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                        args=["--no-sandbox", "--disable-gpu", "--allow-file-access-from-files"])
            page = browser.new_page(viewport={"width": 1300, "height": 1200})
            # alternate, so that a slower moment of a loaded machine falls on both
            runs = {"hand-written": [], "uplot": []}
            for _ in range(3):
                runs["hand-written"] += _time(page, old, state, args.repeats)[1:]
                runs["uplot"] += _time(page, new, state, args.repeats)[1:]
            browser.close()
        sizes = {"hand-written": old.stat().st_size, "uplot": new.stat().st_size}
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(json.dumps({"points_per_series": args.points, "runs": 2, "redraw_ms_median": med,
                      "uplot_over_hand_written": med["uplot"] / med["hand-written"],
                      "bundle_bytes": sizes}, indent=2))


if __name__ == "__main__":
    main()
