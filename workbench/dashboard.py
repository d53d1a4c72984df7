"""The live dashboard: one display output per run, live where it can be, static everywhere.

Each run gets one display output whose mime bundle holds
(a) a live anywidget (``assets/dashboard.js``, written here, drawing on a canvas) and
(b) a static part: a matplotlib Agg PNG and an HTML metrics table.
A front end that runs widgets draws (a); GitHub, nbconvert, untrusted JupyterLab and VS
Code without widget state fall back to (b).

Where it runs is decided once per run (:func:`frontend`): ``live`` in a Jupyter kernel
that a user's front end started, ``static`` in a kernel nobody watches (papermill,
nbconvert), ``text`` outside IPython (a single progress line). In ``static`` mode nothing
live is sent: the PNG and table are refreshed through one display handle at evaluations,
at the end and on error, so an executed notebook holds one current picture per run.
Live updates carry only new points, as float32 buffers, at most 4 messages a second.
"""

from __future__ import annotations

import base64
import html
import io
import os
import time
from pathlib import Path
from typing import Any

from .progress import TextProgress, in_notebook

ASSETS = Path(__file__).parent / "assets"
MIN_INTERVAL = 0.25  # seconds between live messages: at most 4 a second
MAX_POINTS = 40  # per message: 40 points x 10 float32 fields = 1.6 KB, under 2 KB
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


def frontend(live: str | bool = "auto") -> str:
    """'live', 'static' or 'text': where and how progress can be shown, decided once.

    A kernel started by Jupyter Server for a user's notebook has ``JPY_SESSION_NAME`` in its
    environment; VS Code's kernels have ``VSCODE_PID``. A kernel started by papermill or
    nbconvert has neither: no front end will answer, so nothing live is sent there.
    """
    if live is False:
        return "off"
    if not in_notebook():
        return "text"
    if live is True:
        return "live"
    watched = any(os.environ.get(v) for v in ("JPY_SESSION_NAME", "VSCODE_PID"))
    return "live" if watched else "static"


def _kernel_id() -> str:
    """The Jupyter kernel id, from the connection file name Jupyter gives the kernel."""
    try:
        from ipykernel import get_connection_file

        name = Path(get_connection_file()).stem  # kernel-<id>
        return name.removeprefix("kernel-")
    except Exception:
        return ""


def _widget_class():
    import anywidget
    import traitlets as t

    class LiveChart(anywidget.AnyWidget):
        """The canvas chart. Deltas arrive through ``send``; history is set once at the end."""

        _esm = ASSETS / "dashboard.js"
        _css = ASSETS / "dashboard.css"
        title = t.Unicode("").tag(sync=True)
        current = t.Unicode("").tag(sync=True)  # the run that receives deltas
        status = t.Unicode("running").tag(sync=True)
        max_steps = t.Int(0).tag(sync=True)
        warmup_steps = t.Int(0).tag(sync=True)
        device = t.Unicode("").tag(sync=True)
        mem_total = t.Float(0).tag(sync=True)
        kernel_id = t.Unicode("").tag(sync=True)
        blocking = t.Bool(True).tag(sync=True)
        stoppable = t.Bool(True).tag(sync=True)
        log_scale = t.Bool(True).tag(sync=True)
        history = t.Dict({}).tag(sync=True)
        panels = t.List(PANELS).tag(sync=True)  # what to draw: the list render_png draws
        run_colours = t.List(RUN_COLOURS).tag(sync=True)

    return LiveChart


_WIDGET = None


def LiveChart(**kwargs):  # noqa: N802 (a class built on first use, so anywidget loads lazily)
    global _WIDGET
    if _WIDGET is None:
        _WIDGET = _widget_class()
    return _WIDGET(**kwargs)


def _downsample(values: list, limit: int) -> list:
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
    return {part: {k: _downsample(v, HISTORY_POINTS) for k, v in cols.items()} for part, cols in s.items()}


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


# --------------------------------------------------------------------------- one run
class Dashboard:
    """Follows one run's events: live deltas in ``live`` mode, a static picture always.

    It reads no run file while the run trains, and the run's summary once, at the end."""

    def __init__(self, run, mode: str = "static", blocking: bool = True, sink=None):
        self.run, self.mode, self.blocking = run, mode, blocking
        self.events: list[dict] = []
        self.pending, self.pending_eval = [], []  # train and eval events not sent yet
        self.last_send = 0.0
        self.messages = 0
        self.max_steps = 0
        self.mem_total = 0.0
        self.summary: dict[str, Any] | None = None  # the run's summary, read once at the end
        self.warmup_steps = int(run.spec["args"].get("throughput_warmup_steps") or 0)
        self.handle = None
        self.widget = None
        if mode == "live":
            self.widget = LiveChart(title=run.name, current=run.name, kernel_id=_kernel_id(),
                                    blocking=blocking, warmup_steps=self.warmup_steps)
            self.widget.on_msg(self._on_msg)
            if sink is not None:  # tests and the benchmark: a stand-in front end
                self.widget.comm = sink
        run.dashboard = self

    # ------------------------------------------------------------------ display
    def figures(self) -> dict[str, Any]:
        """The table's figures: the run's summary once it ended, before that the latest events."""
        if self.summary is not None:
            return self.summary
        last = next((e for e in reversed(self.events) if e.get("phase") != "eval"), {})
        evals = next((e for e in reversed(self.events) if e.get("phase") == "eval"), {})
        return {"status": "running", "step": last.get("step"), "train_loss": last.get("loss"),
                "eval": {k.removeprefix("eval_"): v for k, v in evals.items() if k.startswith("eval_")},
                "tokens_per_s": last.get("tokens_per_s"), "samples_per_s": last.get("samples_per_s")}

    def _bundle(self, with_png: bool) -> dict[str, Any]:
        figures = self.figures()
        data: dict[str, Any] = {"text/plain": f"{self.run.name}: {figures.get('status')}"}
        picture = ""
        if with_png:
            png = base64.b64encode(render_png({self.run.name: self.events}, self.mem_total,
                                              self.warmup_steps)).decode()
            data["image/png"] = png
            # Front ends show one mime type per output, and most rank HTML above PNG: the
            # HTML carries the picture too, so whichever they pick shows the plots.
            picture = f"<img src='data:image/png;base64,{png}' style='max-width:100%'/>"
        data["text/html"] = (f"<div><b>{html.escape(self.run.name)}</b></div>" + picture
                             + render_table({self.run.name: figures}))
        if self.widget is not None:
            data["application/vnd.jupyter.widget-view+json"] = {
                "version_major": 2, "version_minor": 0, "model_id": self.widget.model_id}
        return data

    def show(self) -> None:
        from IPython.display import display

        self.handle = display(self._bundle(with_png=False), raw=True, display_id=True)

    def refresh(self) -> None:
        """Redraw the static part (and keep the widget) through the one display handle."""
        if self.handle is not None:
            self.handle.update(self._bundle(with_png=bool(self.events)), raw=True)

    # ------------------------------------------------------------------ events
    def __call__(self, event: dict) -> None:
        phase = event.get("phase")
        if phase == "start":
            self.max_steps = int(event.get("max_steps") or 0)
            self.mem_total = float(event.get("mem_total") or 0)
            if self.widget is not None:
                w = self.widget
                w.max_steps, w.mem_total, w.device, w.status = (
                    self.max_steps, self.mem_total, str(event.get("device", "")), "running")
            return
        if phase in ("warmup", "train", "eval"):
            self.events.append(event)
            (self.pending_eval if phase == "eval" else self.pending).append(event)
            if self.widget is not None and time.monotonic() - self.last_send >= MIN_INTERVAL:
                self.flush()
            if phase == "eval" and self.widget is None:
                self.refresh()
            return
        if phase == "end":
            self.finish(event)

    def flush(self) -> None:
        """Send the points not yet sent: one message, float32 buffers."""
        import numpy as np

        if self.widget is None or not (self.pending or self.pending_eval):
            return
        train = _downsample(self.pending, MAX_POINTS)  # keep messages small
        evals = _downsample(self.pending_eval, MAX_POINTS)
        rows = [[_nan(e.get(f)) if f != "warmup" else float(e.get("phase") == "warmup")
                 for f in TRAIN_FIELDS] for e in train]
        erows = [[_nan(e.get(f)) for f in EVAL_FIELDS] for e in evals]
        buffers = [np.asarray(rows, dtype=np.float32).reshape(-1).tobytes(),
                   np.asarray(erows, dtype=np.float32).reshape(-1).tobytes()]
        self.widget.send({"type": "delta", "run": self.run.name, "fields": list(TRAIN_FIELDS),
                          "n": len(rows), "efields": list(EVAL_FIELDS), "en": len(erows)}, buffers)
        self.pending, self.pending_eval = [], []
        self.last_send = time.monotonic()
        self.messages += 1

    def finish(self, event: dict | None = None) -> None:
        """The end (or an error): last points, the summary, full history, final picture."""
        self.summary = dict(self.run.summary)  # written before the end event: read once, here
        if event and event.get("status"):
            self.summary["status"] = event["status"]
        if self.widget is not None:
            self.flush()
            self.widget.history = {self.run.name: history(self.events)}
            self.widget.status = self.summary.get("status", "")
        self.refresh()

    def _on_msg(self, widget, content, buffers) -> None:
        if isinstance(content, dict) and content.get("type") == "stop":
            self.run.stop()


def _nan(v: Any) -> float:
    return float("nan") if v is None else float(v)


def attach(run, live: str | bool = "auto", background: bool = False) -> None:
    """Subscribe the right display to ``run``: live widget, static picture or text line."""
    mode = frontend(live)
    if mode == "off":
        return
    if mode == "text":
        run.subscribe(TextProgress(run))
        return
    dash = Dashboard(run, mode=mode, blocking=not background)
    dash.show()
    run.subscribe(dash)


# --------------------------------------------------------------------------- comparison
class Comparison:
    """Several runs side by side: ``.table`` (DataFrame); displays as one overlay chart.

    The runs' events and summaries are read once, here: displaying it reads no file."""

    def __init__(self, runs: list, table):
        self.runs, self.table = runs, table
        # the table's column names: the same run twice gets two names ("name", "name #2")
        names = [str(c) for c in table.columns] if len(table.columns) == len(runs) else [r.name for r in runs]
        self.events = {n: r.events for n, r in zip(names, runs)}
        self.summaries = {n: {**r.summary, "status": r.status} for n, r in zip(names, runs)}

    def __getitem__(self, key):
        return self.table[key]

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        mem_total = max((float(s.get("mem_total") or 0) for s in self.summaries.values()), default=0)
        png = base64.b64encode(render_png(self.events, mem_total)).decode()
        data: dict[str, Any] = {
            "text/plain": self.table.to_string(),
            "text/html": (f"<img src='data:image/png;base64,{png}' style='max-width:100%'/>"
                          + render_table(self.summaries)),
            "image/png": png,
        }
        if frontend("auto") == "live":
            w = LiveChart(title=f"{len(self.runs)} runs", current="", status="compared",
                          stoppable=False, mem_total=mem_total,
                          history={n: history(e) for n, e in self.events.items()})
            data["application/vnd.jupyter.widget-view+json"] = {
                "version_major": 2, "version_minor": 0, "model_id": w.model_id}
        return data

    def __repr__(self) -> str:
        return self.table.to_string()
