"""The chart a run is drawn as, described once, and its static rendering.

``PANELS`` names every panel and series; the live widget (``dashboard``, drawn by
``js/src/chart.js`` with uPlot) and the static picture (``render_png``, matplotlib Agg, for
papermill, nbconvert, GitHub) both draw from it, and ``downsample`` thins the points both
receive. ``render_table`` is the figures table under the picture. A text-to-image run's
sample grids (``samples`` events) are kept by :func:`sample_grids`; the picture ends with
the last one.
"""

from __future__ import annotations

import base64
import io
import textwrap
from typing import Any

from .. import markup

HISTORY_POINTS = 2000  # per series in the history set at the end
SAVED_GRIDS = 8  # sample grids a saved view keeps, evenly spaced, the last always

# The chart, described once: the live view (the ``panels`` trait, read by js/src/chart.js)
# and the static picture (render_png) draw these panels in this order, two to a row, and
# the fields sent live follow from them, so a new panel is one entry here. A panel has a
# ``title`` and a y axis label (``ylabel``, else its ``unit``, else its one series' label);
# values are divided by ``divisor``; ``scale`` ``log``: the view's "log loss" box toggles it;
# ``zero``: the y axis starts at 0; ``one_of``: only the first series with a non-zero value
# (one quantity per axis); ``optional``: only when some run reports a value; ``warmup``:
# the warm-up steps shaded; ``total``: the device's memory, named in the title and drawn
# once usage nears it. A series reads ``field`` from the train events (``eval``: from the
# eval events), drawn ``style`` solid, dashed or dotted, ``marker`` dotting each point,
# ``smooth``: the view's smoothing slider applies. Several runs: a colour per run
# (RUN_COLOURS), series told by style. The run's eval metrics get panels of their own
# (:func:`panels_for`), after the loss.
PANELS: list[dict[str, Any]] = [
    {
        "key": "loss",
        "title": "loss",
        "ylabel": "loss",
        "scale": "log",
        "series": [
            {"field": "loss", "label": "train", "colour": "#1f77b4", "smooth": True},
            {
                "field": "eval_loss",
                "label": "eval",
                "colour": "#d62728",
                "eval": True,
                "style": "dashed",
                "marker": True,
            },
        ],
    },
    {
        "key": "lr",
        "title": "learning rate",
        "ylabel": "learning rate",
        "zero": True,
        "series": [{"field": "lr", "label": "lr", "colour": "#9467bd"}],
    },
    {
        "key": "grad_norm",
        "title": "gradient norm",
        "ylabel": "L2 norm",
        "optional": True,
        "zero": True,
        "series": [
            {"field": "grad_norm", "label": "grad norm", "colour": "#17becf", "smooth": True}
        ],
    },
    {
        "key": "throughput",
        "title": "throughput",
        "one_of": True,
        "warmup": True,
        "zero": True,
        "series": [
            {"field": "tokens_per_s", "label": "tokens/s", "colour": "#2ca02c", "smooth": True},
            {"field": "samples_per_s", "label": "samples/s", "colour": "#ff7f0e", "smooth": True},
        ],
    },
    {
        "key": "memory",
        "title": "device memory",
        "unit": "GiB",
        "divisor": 2**30,
        "total": True,
        "zero": True,
        "series": [
            {"field": "mem_alloc", "label": "allocated", "colour": "#8c564b"},
            {"field": "mem_peak", "label": "peak", "colour": "#e377c2", "style": "dotted"},
        ],
    },
    # Gaudi's cumulative graph-compile counter: a rising line means recompiles (new shapes)
    {
        "key": "compiles",
        "title": "graph compilations",
        "ylabel": "compilations (total)",
        "optional": True,
        "zero": True,
        "series": [{"field": "compiles", "label": "compiles", "colour": "#7f7f7f"}],
    },
]
RUN_COLOURS = [
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
]
_PLOTTED = [s for p in PANELS for s in p["series"]]
# What each live message and the history carry: the step, the clock (for the header's
# elapsed time, the ETA and the time axis), the warm-up flag, and every plotted field; eval
# events: the step, the clock, the loss and the run's metrics (:func:`eval_metrics`).
TRAIN_FIELDS = (
    "step",
    "time",
    "warmup",
    *dict.fromkeys(s["field"] for s in _PLOTTED if not s.get("eval")),
)
EVAL_FIELDS = ("step", "time", *dict.fromkeys(s["field"] for s in _PLOTTED if s.get("eval")))


def eval_metrics(events: list[dict]) -> list[str]:
    """The eval metrics the events report besides the loss (``eval_accuracy``, ``eval_rouge1``,
    ...)."""
    seen = dict.fromkeys(
        k
        for e in events
        if e.get("phase") == "eval"
        for k, v in e.items()
        if k.startswith("eval_") and k not in EVAL_FIELDS and isinstance(v, (int, float))
    )
    return sorted(seen)


def panels_for(metrics: list[str] = ()) -> list[dict[str, Any]]:
    """PANELS with a panel per eval metric after the loss (the ROUGE scores share one)."""
    groups: dict[str, list[str]] = {}
    for field in metrics:
        name = field.removeprefix("eval_")
        groups.setdefault("rouge" if name.startswith("rouge") else name, []).append(field)
    extra = []
    for key, fields in groups.items():
        title = "ROUGE" if key == "rouge" else key.replace("_", " ")
        extra.append(
            {
                "key": f"eval_{key}",
                "title": f"eval {title}",
                "ylabel": "score" if key == "rouge" else title,
                "series": [
                    {
                        "field": f,
                        "label": f.removeprefix("eval_").replace("_", " "),
                        "colour": RUN_COLOURS[i % len(RUN_COLOURS)],
                        "eval": True,
                        "marker": True,
                    }
                    for i, f in enumerate(fields)
                ],
            }
        )
    return [PANELS[0], *extra, *PANELS[1:]]


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
    return {
        "train": {f: [_num(e.get(f)) for e in train] for f in TRAIN_FIELDS if f != "warmup"},
        "eval": {f: [_num(e.get(f)) for e in evals] for f in (*EVAL_FIELDS, *eval_metrics(events))},
    }


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) else None


def history(events: list[dict]) -> dict[str, dict[str, list]]:
    """A run's series, each downsampled to at most 2,000 points (for the view's state)."""
    s = _series(events)
    return {
        part: {k: downsample(v, HISTORY_POINTS) for k, v in cols.items()}
        for part, cols in s.items()
    }


def sample_grids(events: list[dict], limit: int = SAVED_GRIDS) -> list[dict[str, Any]]:
    """A run's sample grids (its ``samples`` events: step, prompts, columns, base64 PNG), at most
    ``limit``."""
    grids = [
        {k: e.get(k) for k in ("step", "prompts", "columns", "image")}
        for e in events
        if e.get("phase") == "samples" and e.get("image")
    ]
    return downsample(grids, limit)


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


def visible_panels(
    runs: list[dict[str, dict[str, list]]], panels: list[dict] | None = None
) -> list[dict]:
    """The panels to draw for these runs: every one, except optional ones nobody reports."""
    if panels is None:
        panels = panels_for(sorted({f for s in runs for f in s["eval"] if f not in EVAL_FIELDS}))
    return [p for p in panels if not p.get("optional") or any(drawn_series(p, s) for s in runs)]


def _fmt_number(x: float) -> str:
    """A tick or title number, as js/src/chart.js's fmt writes it."""
    a = abs(x)
    if a == 0:
        return "0"
    if a >= 1e6 or a < 1e-3:
        mantissa, exp = f"{x:.1e}".split("e")
        return f"{mantissa}e{int(exp)}"  # 5.0e-4, as JavaScript's toExponential writes it
    if a >= 1000:
        return f"{round(x):,}"
    return f"{float(f'{x:.4g}'):g}"


def panel_title(panel: dict, log: bool = False, warmup: bool = False, total: float = 0) -> str:
    """'loss (log scale)', 'device memory (of 8 GiB total)': js/src/chart.js spells it the same."""
    notes = [
        n
        for n, on in (
            ("log scale", log),
            ("warm-up shaded", warmup),
            (f"of {_fmt_number(total)} {panel.get('unit', '')} total".replace("  ", " "), total),
        )
        if on
    ]
    return panel["title"] + (f" ({', '.join(notes)})" if notes else "")


def y_label(panel: dict, specs: list[dict]) -> str:
    """The y axis label: the panel's, its unit, or its one series' label."""
    return (
        panel.get("ylabel")
        or panel.get("unit")
        or (specs[0]["label"] if len(specs) == 1 else panel["title"])
    )


# --------------------------------------------------------------------------- static part
def render_png(runs: dict[str, list[dict]], mem_total: float = 0, warmup_steps: int = 0) -> bytes:
    """The panels as one PNG: :func:`figure`, saved."""
    buf = io.BytesIO()
    figure(runs, mem_total, warmup_steps).savefig(buf, format="png")
    return buf.getvalue()


def figure(runs: dict[str, list[dict]], mem_total: float = 0, warmup_steps: int = 0):
    """The panels, two to a row, as a matplotlib Figure (Agg; no pyplot, no global state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    series = {name: _series(events) for name, events in runs.items()}
    panels = visible_panels(list(series.values()))
    rows = max(1, -(-len(panels) // 2))
    grids = (
        sample_grids(next(iter(runs.values())), 1) if len(runs) == 1 else []
    )  # one run's last grid
    image = _decode(grids[0]["image"]) if grids else None
    extra = (
        min(max(10 * image.height / image.width, 1.0), 4.0) + 0.8 if image is not None else 0
    )  # inches
    fig = Figure(figsize=(10, 2.6 * rows + extra), dpi=80)
    FigureCanvasAgg(fig)
    layout = fig.add_gridspec(
        rows + bool(extra), 2, height_ratios=[2.6] * rows + ([extra] if extra else [])
    )
    axes = [fig.add_subplot(layout[r, c]) for r in range(rows) for c in range(2)]
    if image is not None:
        _draw_grid(fig.add_subplot(layout[rows, :]), grids[0], image)
    xmax = max(
        (x for s in series.values() for part in s.values() for x in part["step"] if x is not None),
        default=0,
    )
    for ax, panel in zip(axes, panels):
        _draw(ax, panel, series, mem_total, warmup_steps)
        ax.set_xlim(0, xmax * 1.03 if xmax > 0 else 1)  # from step 0; a last point drawn whole
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def _decode(image: str):
    """A base64 PNG as a PIL image (RGB)."""
    from PIL import Image

    return Image.open(io.BytesIO(base64.b64decode(image))).convert("RGB")


def _draw_grid(ax, grid: dict, image) -> None:
    """A sample grid, pixels unsmoothed; its prompts under the columns when they fit one row."""
    import numpy as np

    ax.imshow(np.asarray(image), interpolation="nearest")
    ax.set_title(f"samples at step {grid['step']}", fontsize=10)
    prompts, columns = grid.get("prompts") or [], int(grid.get("columns") or 1)
    ax.set_yticks([])
    if 0 < len(prompts) <= columns:
        width = image.width / columns
        ax.set_xticks(
            [(i + 0.5) * width for i in range(len(prompts))],
            [textwrap.fill(p, 16) for p in prompts],
            fontsize=7,
        )
        ax.tick_params(length=0)
    else:
        ax.set_xticks([])


def _draw(ax, panel: dict, series: dict[str, dict], mem_total: float, warmup_steps: int) -> None:
    """One panel on matplotlib axes, as js/src/chart.js draws it with uPlot."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

    many = len(series) > 1
    divisor = panel.get("divisor", 1)
    positive, top, drawn = False, 0.0, []
    for i, (name, s) in enumerate(series.items()):
        for spec in drawn_series(panel, s):
            drawn.append(spec)
            part = s["eval" if spec.get("eval") else "train"]
            ys = [None if v is None else v / divisor for v in part[spec["field"]]]
            positive = positive or any(v is not None and v > 0 for v in ys)
            colour = RUN_COLOURS[i % len(RUN_COLOURS)] if many else spec["colour"]
            label = f"{name[-28:]} {spec['label']}" if many else spec["label"]
            style = {"solid": "-", "dashed": "--", "dotted": ":"}[spec.get("style", "solid")]
            pts = [(x, y) for x, y in zip(part["step"], ys) if x is not None and y is not None]
            if pts:
                top = max(top, *(y for _, y in pts))
                ax.plot(
                    *zip(*pts),
                    style,
                    color=colour,
                    label=label,
                    lw=1.4,
                    marker="o" if spec.get("marker") or len(pts) == 1 else None,
                    ms=3.5,
                )
    if not ax.lines:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", color="#999")
    log = panel.get("scale") == "log" and positive
    number = FuncFormatter(lambda v, _: _fmt_number(v))
    if log:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    else:
        ax.yaxis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 5, 10]))
        if panel.get("zero") and top > 0:
            ax.set_ylim(0, top * 1.08)  # from 0, the highest point clear of the frame
    ax.yaxis.set_major_formatter(number)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 5, 10], integer=True))
    ax.xaxis.set_major_formatter(number)
    shade = bool(panel.get("warmup") and warmup_steps)
    if shade:
        ax.axvspan(0, warmup_steps, color="#ffbe00", alpha=0.13, lw=0)
    total = mem_total / divisor if panel.get("total") and mem_total else 0
    if total and top > 0.5 * total:  # the device's size, once usage nears it
        ax.axhline(total, color="#888", ls="--", lw=1)
    ax.set_title(panel_title(panel, log, shade, total), fontsize=10)
    ax.set_xlabel("step", fontsize=9)
    ax.set_ylabel(
        y_label(panel, list({id(d): d for d in drawn}.values()) or panel["series"]), fontsize=9
    )
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")


def render_table(summaries: dict[str, dict]) -> str:
    """An HTML table of each run's headline figures."""
    keys = [
        ("status", "status"),
        ("step", "step"),
        ("train_loss", "train loss"),
        ("eval", "eval"),
        ("tokens_per_s", "tokens/s"),
        ("samples_per_s", "samples/s"),
        ("mem_peak", "peak memory"),
        ("counts", "so far"),
        ("after_warmup", "after warm-up"),
        ("wall_time_s", "wall time (s)"),
        ("error", "error"),
    ]
    rows = []
    for key, label in keys:
        vals = [s.get(key) for s in summaries.values()]
        if all(v in (None, {}, "") for v in vals):
            continue
        rows.append([label, *(_fmt(key, v) for v in vals)])
    return markup.table(rows, ["", *summaries], styles=(f"color:{markup.LABEL}",))


def eval_rows(events: list[dict]) -> tuple[list[str], list[list[Any]]]:
    """One row per evaluation, as Hugging Face's notebook progress table has it: step, epoch,
    the training loss last logged by then, the eval loss and each eval metric; (head, rows).
    An evaluation repeated at one step (a run's final one) is one row, the last."""
    metrics = eval_metrics(events)
    head = ["step", "epoch", "train loss", "eval loss", *(m.removeprefix("eval_") for m in metrics)]
    last_train: dict = {}
    by_step: dict[int, list[Any]] = {}
    for e in events:
        phase = e.get("phase")
        if phase in ("warmup", "train") and e.get("loss") is not None:
            last_train = e
        elif phase == "eval":
            by_step[e.get("step")] = [
                e.get("step"),
                last_train.get("epoch"),
                last_train.get("loss"),
                e.get("eval_loss"),
                *(e.get(m) for m in metrics),
            ]
    return head, list(by_step.values())


def render_eval_table(events: list[dict]) -> str:
    """The evaluations of one run as an HTML table ("" for a run that never evaluated)."""
    head, rows = eval_rows(events)
    if not rows:
        return ""
    cells = [[_fmt("step", r[0]), *("-" if v is None else f"{v:.4g}" for v in r[1:])] for r in rows]
    return markup.table(cells, head)


def step_counts(c: dict) -> str:
    """'0 CPU fallbacks, 0 recompiles, 0 graph breaks over 12 steps' (what the device counts:
    the parts it cannot are left out); fallback ops by name after the counts."""
    parts = [
        f"{c[key]} {label}"
        for key, label in (
            ("cpu_fallbacks", "CPU fallbacks"),
            ("recompiles", "recompiles"),
            ("compiles", "graph compiles"),
            ("graph_breaks", "graph breaks"),
        )
        if c.get(key) is not None
    ]
    text = ", ".join(parts) or "-"
    if c.get("steps") is not None:
        text += f" over {c['steps']} steps"
    ops = c.get("fallback_ops") or {}
    if ops:
        text += " (" + ", ".join(f"{k} x{n}" for k, n in ops.items()) + ")"
    return text


def _fmt(key: str, v: Any) -> str:
    if v is None:
        return "-"
    if key == "mem_peak" and isinstance(v, (int, float)):
        return f"{v / 2**30:.2f} GiB"
    if key in ("counts", "after_warmup") and isinstance(v, dict):
        return step_counts(v)
    if isinstance(v, float):
        return f"{v:,.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt(k, x)}" for k, x in v.items())
    return str(v)
