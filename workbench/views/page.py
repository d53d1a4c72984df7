"""What a run's output becomes once the run ends: a chart that needs no kernel.

A widget's output shows "Error displaying widget: model not found" once its kernel is gone, so
at its end a run's output is replaced by this one, without a widget view: ``text/html`` (the
static picture and figures table, the view's state as JSON and ``assets/build/page.js``, which
makes it interactive where the front end runs scripts) and ``image/png``.
"""

from __future__ import annotations

import base64
import html
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..jsonvalues import plain
from .chart import (
    chart_spec,
    history,
    marks,
    render_eval_table,
    render_png,
    render_table,
    sample_grids,
)

BUILD = Path(__file__).resolve().parents[1] / "assets" / "build"


def asset(name: str) -> Path:
    """A file of the built dashboard (``dashboard.js``, ``page.js``), or why it is missing."""
    path = BUILD / name
    if not path.exists():
        raise FileNotFoundError(
            f"the dashboard's JavaScript is not built ({path} is missing): in a clone run `make "
            "lab` "
            "or `cd js && npm ci && npm run build` (needs Node.js 18+); installed wheels ship it "
            "built"
        )
    return path


@lru_cache(maxsize=1)
def _page_script() -> str:
    # an inline <script> ends at the first "</script": escape any in the bundle's strings
    import re

    return re.sub(r"</(script)", r"<\\/\1", asset("page.js").read_text(), flags=re.I)


def finite_json(value: Any) -> Any:
    """JSON for the browser (JSON.parse refuses NaN): ``jsonvalues``' "null" rule."""
    return plain(value, nonfinite="null")


def view_state(
    runs: dict[str, list[dict]],
    summaries: dict[str, dict],
    *,
    title: str,
    status: str,
    current: str = "",
    max_steps: int = 0,
    warmup_steps: int = 0,
    device: str = "",
    mem_total: float = 0.0,
) -> dict[str, Any]:
    """The state the view draws from: what the live widget's traits hold at a run's end."""
    return {
        "title": title,
        "current": current,
        "status": status,
        "max_steps": max_steps,
        "warmup_steps": warmup_steps,
        "device": device,
        "mem_total": mem_total,
        "stoppable": False,
        "log_scale": True,
        "blocking": False,
        "kernel_id": "",
        "chart": chart_spec({n: marks(e) for n, e in runs.items()}, mem_total, warmup_steps),
        "history": {n: history(e) for n, e in runs.items()},
        "samples": {n: g for n, g in ((n, sample_grids(e)) for n, e in runs.items()) if g},
        "summary": summaries.get(current, {}) if current else {},
    }


def saved_output(
    runs: dict[str, list[dict]],
    summaries: dict[str, dict],
    state: dict[str, Any],
    heading: str = "",
) -> dict[str, Any]:
    """The mime bundle of a finished run (or a comparison): no widget view, see the module doc."""
    mem_total = float(state.get("mem_total") or 0)
    png = base64.b64encode(
        render_png(runs, mem_total, int(state.get("warmup_steps") or 0), state.get("chart"))
    ).decode()
    fallback = (
        (f"<div><b>{html.escape(heading)}</b></div>" if heading else "")
        + f"<img src='data:image/png;base64,{png}' style='max-width:100%'/>"
        + render_table(summaries)
    )
    data = json.dumps(finite_json(state), separators=(",", ":")).replace("</", "<\\/")
    # one run's evaluations, a row each: outside the fallback, so the interactive view keeps it
    evals = render_eval_table(next(iter(runs.values()))) if len(runs) == 1 else ""
    if evals:
        evals = f"<div class='wb-evals'><b>Evaluations</b>{evals}</div>"
    page = (
        f"<div class='wb-saved'><div class='wb-fallback'>{fallback}</div>{evals}"
        f"<script type='application/json' class='wb-state'>{data}</script>"
        f"<script>{_page_script()}</script></div>"
    )
    status = state.get("status", "")
    return {
        "text/plain": f"{heading or state.get('title', '')}: {status}",
        "text/html": page,
        "image/png": png,
    }
