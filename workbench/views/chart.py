"""The chart a run is drawn as, described once, and its static rendering.

The drawing rules live in ``assets/chart.json`` (``SPEC``); what it means for some runs is read
once, by :func:`chart_spec`, and both the live widget (``js/src/chart.js``, uPlot) and the
static picture (``render_png``, matplotlib Agg) draw that. ``render_table`` is the figures
table; a text-to-image run's sample grids are kept by :func:`sample_grids`.
"""

from __future__ import annotations

import base64
import copy
import io
import json
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import markup

HISTORY_POINTS = 2000  # per series in the history set at the end
SAVED_GRIDS = 8  # sample grids a saved view keeps, evenly spaced, the last always

# its fields: docs/dashboard.md, "The chart spec"; a new panel is one entry there
SPEC_PATH = Path(__file__).resolve().parents[1] / "assets" / "chart.json"
SPEC: dict[str, Any] = {
    k: v for k, v in json.loads(SPEC_PATH.read_text()).items() if not k.startswith("$")
}
PANELS: list[dict[str, Any]] = SPEC["panels"]
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


def eval_metrics(seen: dict[tuple[str, str], bool]) -> list[str]:
    """The eval metrics besides the loss (``eval_accuracy``, ``eval_rouge1``, ...) that a run
    (its :func:`marks`) reports."""
    return sorted(
        f for part, f in seen if part == "eval" and f.startswith("eval_") and f not in EVAL_FIELDS
    )


def panels_for(metrics: Sequence[str] = (), spec: dict | None = None) -> list[dict[str, Any]]:
    """The spec's panels with a panel per eval metric after the loss (the ROUGE scores share
    one): the spec's ``metric_panels`` says where, their titles and which metrics group."""
    spec = spec or SPEC
    rule = spec["metric_panels"]
    drawn = {s["field"] for p in spec["panels"] for s in p["series"]}  # a chart_spec's, already
    groups: dict[str, list[str]] = {}
    for field in (m for m in metrics if m not in drawn):
        name = field.removeprefix("eval_")
        key = next((g for g in rule["groups"] if name.startswith(g)), name)
        groups.setdefault(key, []).append(field)
    extra = []
    for key, fields in groups.items():
        group = rule["groups"].get(key, {})
        title = group.get("title", key.replace("_", " "))
        extra.append(
            {
                "key": f"eval_{key}",
                "title": rule["title"].format(name=title),
                "ylabel": group.get("ylabel", title),
                "series": [
                    {
                        "field": f,
                        "label": f.removeprefix("eval_").replace("_", " "),
                        "colour": spec["run_colours"][i % len(spec["run_colours"])],
                        "eval": True,
                        "marker": True,
                    }
                    for i, f in enumerate(fields)
                ],
            }
        )
    panels = spec["panels"]
    at = 1 + next((i for i, p in enumerate(panels) if p["key"] == rule["after"]), -1)
    return [*panels[:at], *extra, *panels[at:]]


def chart_spec(
    runs: dict[str, dict] | None = None,
    mem_total: float = 0,
    warmup_steps: int = 0,
    spec: dict | None = None,
) -> dict[str, Any]:
    """What both renderers draw from (the view's ``chart`` trait): the spec with the runs' eval
    metrics' panels, each read once for these runs: ``drawn``, ``shown``, ``heading``
    (``heading_log`` on a log axis), ``axis`` and ``device_total`` (0: none). A copy."""
    spec, runs = spec or SPEC, runs or {}
    metrics = sorted({f for m in runs.values() for f in eval_metrics(m)})
    panels = copy.deepcopy(panels_for(metrics, spec))
    notes = spec["notes"]
    for p in panels:
        p["drawn"] = {run: [s["field"] for s in drawn_series(p, m)] for run, m in runs.items()}
        p["shown"] = not p.get("optional") or any(p["drawn"].values())
        total = p["device_total"] = mem_total / p.get("divisor", 1) if p.get("total") else 0
        of = notes["total"].format(total=_fmt_number(total), unit=p.get("unit", ""))
        said = [notes["warmup"] if p.get("warmup") and warmup_steps else "", of if total else ""]
        p["heading"] = _heading(p["title"], *said)
        if p.get("scale") == "log":
            p["heading_log"] = _heading(p["title"], notes["log"], *said)
        drawn = [s for s in p["series"] if any(s["field"] in f for f in p["drawn"].values())]
        one = drawn or p["series"]
        p["axis"] = (
            p.get("ylabel") or p.get("unit") or (one[0]["label"] if len(one) == 1 else p["title"])
        )
    return copy.deepcopy({**spec, "panels": panels})


def _heading(title: str, *notes: str) -> str:
    shown = [" ".join(n.split()) for n in notes if n]
    return title + (f" ({', '.join(shown)})" if shown else "")


def downsample(values: list, limit: int) -> list:
    """At most ``limit`` evenly spaced items of ``values``, always keeping the last (newest):
    the dashboard's one thinning (the browser thins nothing itself)."""
    if len(values) <= limit:
        return values
    stride = len(values) / limit
    return [values[int(i * stride)] for i in range(limit - 1)] + [values[-1]]


def _series(events: list[dict]) -> dict[str, dict[str, list]]:
    train = [e for e in events if e.get("phase") in ("warmup", "train")]
    evals = [e for e in events if e.get("phase") == "eval"]
    return {
        "train": {f: [_num(e.get(f)) for e in train] for f in TRAIN_FIELDS if f != "warmup"},
        "eval": {
            f: [_num(e.get(f)) for e in evals] for f in (*EVAL_FIELDS, *eval_metrics(marks(events)))
        },
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
def marks(events: list[dict], into: dict | None = None) -> dict[tuple[str, str], bool]:
    """Which fields of these events (``("train", "loss")``, ``("eval", "eval_loss")``) hold a
    number, each True once one is non-zero; added to ``into`` when given."""
    into = {} if into is None else into
    for e in events:
        part = {"warmup": "train", "train": "train", "eval": "eval"}.get(str(e.get("phase")))
        for k, v in e.items() if part else ():
            if isinstance(v, (int, float)):
                into[part, k] = into.get((part, k), False) or bool(v)
    return into


def drawn_series(panel: dict, seen: dict[tuple[str, str], bool]) -> list[dict]:
    """The series of ``panel`` that one run (its :func:`marks`) has values for."""
    out = []
    for spec in panel["series"]:
        key = ("eval" if spec.get("eval") else "train", spec["field"])
        if panel.get("one_of"):
            if seen.get(key):  # the first with a non-zero value, and only that one
                return [spec]
        elif key in seen:
            out.append(spec)
    return out


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


# --------------------------------------------------------------------------- static part
def render_png(
    runs: dict[str, list[dict]],
    mem_total: float = 0,
    warmup_steps: int = 0,
    spec: dict | None = None,
) -> bytes:
    """The panels as one PNG: :func:`figure`, saved."""
    buf = io.BytesIO()
    figure(runs, mem_total, warmup_steps, spec).savefig(buf, format="png")
    return buf.getvalue()


def figure(
    runs: dict[str, list[dict]],
    mem_total: float = 0,
    warmup_steps: int = 0,
    spec: dict | None = None,
):
    """The panels, two to a row, as a matplotlib Figure (Agg; no pyplot, no global state).

    ``spec``: the chart spec (:func:`chart_spec`'s shape; assets/chart.json by default)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    spec = chart_spec({n: marks(e) for n, e in runs.items()}, mem_total, warmup_steps, spec)
    series = {name: _series(events) for name, events in runs.items()}
    panels = [p for p in spec["panels"] if p["shown"]]
    cols = spec["columns"]
    rows = max(1, -(-len(panels) // cols))
    # one run's last grid
    grids = sample_grids(next(iter(runs.values())), 1) if len(runs) == 1 else []
    image = _decode(grids[0]["image"]) if grids else None
    # inches
    extra = min(max(10 * image.height / image.width, 1.0), 4.0) + 0.8 if image is not None else 0
    fig = Figure(figsize=(10, 2.6 * rows + extra), dpi=80)
    FigureCanvasAgg(fig)
    layout = fig.add_gridspec(
        rows + bool(extra), cols, height_ratios=[2.6] * rows + ([extra] if extra else [])
    )
    axes = [fig.add_subplot(layout[r, c]) for r in range(rows) for c in range(cols)]
    if image is not None:
        _draw_grid(fig.add_subplot(layout[rows, :]), grids[0], image)
    xmax = max(
        (x for s in series.values() for part in s.values() for x in part["step"] if x is not None),
        default=0,
    )
    for ax, panel in zip(axes, panels):
        _draw(ax, panel, series, warmup_steps, spec)
        # from step 0 to a little past the last point, so that a last point is drawn whole
        ax.set_xlim(0, xmax * (1 + spec["x"]["pad"]) if xmax > 0 else 1)
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


def _line(pattern: list[float], width_px: float) -> Any:
    """A dash pattern in pixels (as the browser's canvas takes it) as matplotlib's linestyle
    (dashes in line widths, matplotlib's default scaling)."""
    return "-" if not pattern else (0, tuple(d / width_px for d in pattern))


def _draw(ax, panel: dict, series: dict[str, dict], warmup_steps: int, spec: dict) -> None:
    """One panel on matplotlib axes, as js/src/chart.js draws it with uPlot, by the spec."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

    pt = 72 / ax.figure.dpi  # the spec's sizes are in pixels, matplotlib's in points
    line, colours = spec["line"], spec["run_colours"]
    many = len(series) > 1
    divisor = panel.get("divisor", 1)
    positive, top = False, 0.0
    for i, (name, s) in enumerate(series.items()):
        for one in (x for x in panel["series"] if x["field"] in panel["drawn"].get(name, ())):
            part = s["eval" if one.get("eval") else "train"]
            ys = [None if v is None else v / divisor for v in part[one["field"]]]
            positive = positive or any(v is not None and v > 0 for v in ys)
            colour = colours[i % len(colours)] if many else one["colour"]
            label = f"{name[-spec['run_name_chars'] :]} {one['label']}" if many else one["label"]
            pts = [(x, y) for x, y in zip(part["step"], ys) if x is not None and y is not None]
            if pts:
                top = max(top, *(y for _, y in pts))
                ax.plot(
                    *zip(*pts),
                    color=colour,
                    label=label,
                    lw=line["width_px"] * pt,
                    ls=_line(line["styles"][one.get("style", "solid")], line["width_px"]),
                    marker="o" if one.get("marker") or len(pts) == 1 else None,
                    ms=line["marker_px"] * pt,
                )
    if not ax.lines:
        empty = spec["empty"]
        ax.text(0.5, 0.5, empty["text"], transform=ax.transAxes, ha="center", color=empty["colour"])
    log = panel.get("scale") == "log" and positive
    number = FuncFormatter(lambda v, _: _fmt_number(v))
    steps = [*spec["tick_steps"], 10]
    if log:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=spec["tick_steps"]))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    else:
        ax.yaxis.set_major_locator(MaxNLocator(nbins=5, steps=steps))
        if panel.get("zero") and top > 0:
            ax.set_ylim(0, top * (1 + spec["y"]["pad"]))  # the highest point clear of the frame
    ax.yaxis.set_major_formatter(number)
    whole = "step" in spec["x"]["whole"]  # this picture's x axis is the step
    ax.xaxis.set_major_locator(MaxNLocator(nbins=6, steps=steps, integer=whole))
    ax.xaxis.set_major_formatter(number)
    shade = bool(panel.get("warmup") and warmup_steps)
    if shade:
        warm = spec["warmup_shade"]
        ax.axvspan(0, warmup_steps, color=warm["colour"], alpha=warm["alpha"], lw=0)
    total = panel["device_total"]
    rule = spec["total_line"]
    if total and top > rule["from"] * total:  # the device's size, once usage nears it
        ax.axhline(total, color=rule["colour"], lw=pt, ls=_line(rule["dash"], 1))
    ax.set_title(panel["heading_log" if log else "heading"], fontsize=10)
    ax.set_xlabel(spec["x"]["labels"]["step"], fontsize=9)
    ax.set_ylabel(panel["axis"], fontsize=9)
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
    metrics = eval_metrics(marks(events))
    head = ["step", "epoch", "train loss", "eval loss", *(m.removeprefix("eval_") for m in metrics)]
    last_train: dict = {}
    by_step: dict[int | None, list[Any]] = {}
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
    the parts it cannot are left out); fallback ops by name after the counts. A run that ended
    within warm-up, and a device that counts none of these, say so instead."""
    parts = [
        f"{c[key]} {label}"
        for key, label in (
            ("cpu_fallbacks", "CPU fallbacks"),
            ("host_syncs", "host syncs"),
            ("recompiles", "recompiles"),
            ("compiles", "graph compiles"),
            ("graph_breaks", "graph breaks"),
        )
        if c.get(key) is not None
    ]
    if c.get("steps") == 0:  # a run that ended within warm-up: nothing after it to count
        return "no steps after warm-up: the run ended within it"
    if not parts:  # a CPU counts none of these
        return "-" if c.get("steps") is None else f"not counted on this device ({c['steps']} steps)"
    text = ", ".join(parts)
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
