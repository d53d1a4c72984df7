"""The chart a run is drawn as, described once, and its static rendering.

``PANELS`` names every panel and series; the live widget (``dashboard``, drawn by
``assets/dashboard.js``) and the static picture (``render_png``, matplotlib Agg, for
papermill, nbconvert, GitHub) both draw from it, and ``downsample`` thins the points both
receive. ``render_table`` is the figures table under the picture.
"""

from __future__ import annotations

import html
import io
from typing import Any

HISTORY_POINTS = 2000  # per series in the history set at the end

# The chart, described once: the live widget (its ``panels`` trait, read by dashboard.js)
# and the static PNG (render_png) draw these panels in this order, two to a row, and the
# fields sent live follow from them, so a new panel is one entry here. A panel has a
# ``title``, a ``unit`` (values divided by ``divisor``), a ``scale`` (``log``: the live
# "log" box toggles it); ``one_of``: only the first series with a non-zero value;
# ``optional``: only when some run reports a value; ``warmup``: the warm-up steps shaded;
# ``total``: a line at the device's memory. A series reads ``field`` from the train events
# (``eval``: from the eval events), drawn ``style`` solid, dashed or dotted, ``marker``
# dotting each point. Several runs: a colour per run (RUN_COLOURS), series told by style.
PANELS: list[dict[str, Any]] = [
    {"key": "loss", "title": "loss", "scale": "log", "series": [
        {"field": "loss", "label": "train", "colour": "#1f77b4"},
        {"field": "eval_loss", "label": "eval", "colour": "#d62728", "eval": True, "style": "dashed",
         "marker": True}]},
    {"key": "lr", "title": "learning rate", "series": [
        {"field": "lr", "label": "lr", "colour": "#9467bd"}]},
    {"key": "throughput", "title": "throughput", "one_of": True, "warmup": True, "series": [
        {"field": "tokens_per_s", "label": "tokens/s", "colour": "#2ca02c"},
        {"field": "samples_per_s", "label": "samples/s", "colour": "#ff7f0e"}]},
    {"key": "memory", "title": "device memory", "unit": "GiB", "divisor": 2**30, "total": True, "series": [
        {"field": "mem_alloc", "label": "allocated", "colour": "#8c564b"},
        {"field": "mem_peak", "label": "peak", "colour": "#e377c2", "style": "dotted"}]},
    # Gaudi's cumulative graph-compile counter: a rising line means recompiles (new shapes)
    {"key": "compiles", "title": "graph compilations", "unit": "total", "optional": True, "series": [
        {"field": "compiles", "label": "compiles", "colour": "#7f7f7f"}]},
]
RUN_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
_PLOTTED = [s for p in PANELS for s in p["series"]]
# What each live message and the history carry: the step, the clock (for the header's
# elapsed time and ETA), the warm-up flag, and every plotted field.
TRAIN_FIELDS = ("step", "time", "warmup", *dict.fromkeys(s["field"] for s in _PLOTTED if not s.get("eval")))
EVAL_FIELDS = ("step", *dict.fromkeys(s["field"] for s in _PLOTTED if s.get("eval")))


def downsample(values: list, limit: int) -> list:
    """At most ``limit`` evenly spaced items of ``values``, always keeping the last (newest).

    The dashboard's one thinning, for each live message and for the history: the browser
    draws what it receives and thins nothing itself.
    """
    if len(values) <= limit:
        return values
    stride = len(values) / limit
    return [values[int(i * stride)] for i in range(limit - 1)] + [values[-1]]


def _series(events: list[dict]) -> dict[str, dict[str, list]]:
    train = [e for e in events if e.get("phase") in ("warmup", "train")]
    evals = [e for e in events if e.get("phase") == "eval"]
    return {"train": {f: [_num(e.get(f)) for e in train] for f in TRAIN_FIELDS if f != "warmup"},
            "eval": {f: [_num(e.get(f)) for e in evals] for f in EVAL_FIELDS}}


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) else None


def history(events: list[dict]) -> dict[str, dict[str, list]]:
    """A run's series, each downsampled to at most 2,000 points (for the widget's state)."""
    s = _series(events)
    return {part: {k: downsample(v, HISTORY_POINTS) for k, v in cols.items()} for part, cols in s.items()}


# --------------------------------------------------------------------------- the panels
def drawn_series(panel: dict, series: dict[str, dict[str, list]]) -> list[dict]:
    """The series of ``panel`` that one run (its ``_series``) has values for."""
    out = []
    for spec in panel["series"]:
        values = series["eval" if spec.get("eval") else "train"].get(spec["field"], [])
        if panel.get("one_of"):
            if any(values):  # the first with a non-zero value, and only that one
                return [spec]
        elif any(v is not None for v in values):
            out.append(spec)
    return out


def visible_panels(runs: list[dict[str, dict[str, list]]]) -> list[dict]:
    """The PANELS to draw for these runs: every one, except optional ones nobody reports."""
    return [p for p in PANELS if not p.get("optional") or any(drawn_series(p, s) for s in runs)]


def panel_title(panel: dict, log: bool = False, warmup: bool = False) -> str:
    """'device memory (GiB)', 'loss (log)': dashboard.js's panelTitle spells it the same."""
    notes = [n for n, on in ((panel.get("unit"), True), ("log", log), ("warm-up shaded", warmup)) if n and on]
    return panel["title"] + (f" ({', '.join(notes)})" if notes else "")


# --------------------------------------------------------------------------- static part
def render_png(runs: dict[str, list[dict]], mem_total: float = 0, warmup_steps: int = 0) -> bytes:
    """The PANELS as one PNG: :func:`figure`, saved."""
    buf = io.BytesIO()
    figure(runs, mem_total, warmup_steps).savefig(buf, format="png")
    return buf.getvalue()


def figure(runs: dict[str, list[dict]], mem_total: float = 0, warmup_steps: int = 0):
    """The PANELS, two to a row, as a matplotlib Figure (Agg; no pyplot, no global state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    series = {name: _series(events) for name, events in runs.items()}
    panels = visible_panels(list(series.values()))
    rows = -(-len(panels) // 2)
    fig = Figure(figsize=(9, 2.3 * rows), dpi=80)
    FigureCanvasAgg(fig)
    axes = list(fig.subplots(rows, 2, squeeze=False).flat)
    for ax, panel in zip(axes, panels):
        _draw(ax, panel, series, mem_total, warmup_steps)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def _draw(ax, panel: dict, series: dict[str, dict], mem_total: float, warmup_steps: int) -> None:
    """One panel on matplotlib axes, as drawPanel in dashboard.js draws it on the canvas."""
    many = len(series) > 1
    divisor = panel.get("divisor", 1)
    positive = False
    for i, (name, s) in enumerate(series.items()):
        for spec in drawn_series(panel, s):
            part = s["eval" if spec.get("eval") else "train"]
            ys = [None if v is None else v / divisor for v in part[spec["field"]]]
            positive = positive or any(v is not None and v > 0 for v in ys)
            colour = RUN_COLOURS[i % len(RUN_COLOURS)] if many else spec["colour"]
            label = f"{name[-24:]} {spec['label']}" if many else spec["label"]
            style = {"solid": "-", "dashed": "--", "dotted": ":"}[spec.get("style", "solid")]
            pts = [(x, y) for x, y in zip(part["step"], ys) if x is not None and y is not None]
            if pts:
                ax.plot(*zip(*pts), style, color=colour, label=label, lw=1.4,
                        marker="o" if spec.get("marker") else None, ms=3)
    if not ax.lines:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", color="#999")
    log = panel.get("scale") == "log" and positive
    if log:
        ax.set_yscale("log")
    shade = bool(panel.get("warmup") and warmup_steps)
    if shade:
        ax.axvspan(0, warmup_steps, color="#ffcc00", alpha=0.15, lw=0)
    if panel.get("total") and mem_total:
        ax.axhline(mem_total / divisor, color="#999", ls="--", lw=1, label="total")
    ax.set_title(panel_title(panel, log, shade), fontsize=10)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")


def render_table(summaries: dict[str, dict]) -> str:
    """An HTML table of each run's headline figures."""
    keys = [("status", "status"), ("step", "step"), ("train_loss", "train loss"), ("eval", "eval"),
            ("tokens_per_s", "tokens/s"), ("samples_per_s", "samples/s"), ("mem_peak", "peak memory"),
            ("wall_time_s", "wall time (s)"), ("error", "error")]
    head = "".join(f"<th style='padding:2px 8px;text-align:left'>{html.escape(n)}</th>" for n in summaries)
    rows = []
    for key, label in keys:
        vals = [s.get(key) for s in summaries.values()]
        if all(v in (None, {}, "") for v in vals):
            continue
        cells = "".join(f"<td style='padding:2px 8px'>{html.escape(_fmt(key, v))}</td>" for v in vals)
        rows.append(f"<tr><td style='padding:2px 8px;color:#666'>{html.escape(label)}</td>{cells}</tr>")
    return (f"<table style='font:12px sans-serif;border-collapse:collapse'><tr><th></th>{head}</tr>"
            + "".join(rows) + "</table>")


def _fmt(key: str, v: Any) -> str:
    if v is None:
        return "-"
    if key == "mem_peak" and isinstance(v, (int, float)):
        return f"{v / 2**30:.2f} GiB"
    if isinstance(v, float):
        return f"{v:,.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt(k, x)}" for k, x in v.items())
    return str(v)


