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

Cost per live update: only new points, as float32 buffers, at most 4 messages a second.
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
TRAIN_FIELDS = ("step", "loss", "lr", "samples_per_s", "tokens_per_s", "mem_alloc", "mem_peak",
                "compiles", "time", "warmup")
EVAL_FIELDS = ("step", "eval_loss")


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

    return LiveChart


_WIDGET = None


def LiveChart(**kwargs):  # noqa: N802 (a class built on first use, so anywidget loads lazily)
    global _WIDGET
    if _WIDGET is None:
        _WIDGET = _widget_class()
    return _WIDGET(**kwargs)


def _downsample(values: list, limit: int = HISTORY_POINTS) -> list:
    if len(values) <= limit:
        return values
    stride = len(values) / limit
    picked = [values[int(i * stride)] for i in range(limit - 1)]
    return picked + [values[-1]]


def _series(events: list[dict]) -> dict[str, dict[str, list]]:
    train = [e for e in events if e.get("phase") in ("warmup", "train")]
    evals = [e for e in events if e.get("phase") == "eval"]
    out = {"train": {f: [_num(e.get(f)) for e in train] for f in TRAIN_FIELDS if f != "warmup"},
           "eval": {f: [_num(e.get(f)) for e in evals] for f in EVAL_FIELDS}}
    return out


def _num(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def history(events: list[dict]) -> dict[str, dict[str, list]]:
    """A run's series, each downsampled to at most 2,000 points (for the widget's state)."""
    s = _series(events)
    return {part: {k: _downsample(v) for k, v in cols.items()} for part, cols in s.items()}


# --------------------------------------------------------------------------- static part
def render_png(runs: dict[str, list[dict]], mem_total: float = 0, warmup_steps: int = 0) -> bytes:
    """The four panels as one PNG (matplotlib Agg; no pyplot, no global state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 4.6), dpi=80)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2)
    many = len(runs) > 1
    for i, (name, events) in enumerate(runs.items()):
        s = _series(events)
        tr, ev = s["train"], s["eval"]
        colour = f"C{i}"
        prefix = f"{name[-28:]} " if many else ""

        def label(x: str, prefix: str = prefix) -> str:
            return prefix + x

        _plot(axes[0, 0], tr["step"], tr["loss"], colour if many else "C0", label("train"))
        _plot(axes[0, 0], ev["step"], ev["eval_loss"], colour if many else "C3", label("eval"), "--", "o")
        _plot(axes[0, 1], tr["step"], tr["lr"], colour if many else "C4", label("lr"))
        tput = "tokens_per_s" if any(v for v in tr["tokens_per_s"] if v) else "samples_per_s"
        _plot(axes[1, 0], tr["step"], tr[tput], colour if many else "C2", label(tput.replace("_per_s", "/s")))
        gib = 2**30
        _plot(axes[1, 1], tr["step"], [v / gib if v else None for v in tr["mem_alloc"]], colour if many else "C5", label("allocated"))
        _plot(axes[1, 1], tr["step"], [v / gib if v else None for v in tr["mem_peak"]], colour if many else "C6", label("peak"), ":")
    axes[0, 0].set_title("loss", fontsize=10)
    if any(v and v > 0 for e in runs.values() for v in _series(e)["train"]["loss"]):
        axes[0, 0].set_yscale("log")
    axes[0, 1].set_title("learning rate", fontsize=10)
    axes[1, 0].set_title("throughput (warm-up shaded)", fontsize=10)
    if warmup_steps:
        axes[1, 0].axvspan(0, warmup_steps, color="#ffcc00", alpha=0.15, lw=0)
    axes[1, 1].set_title("device memory (GiB)", fontsize=10)
    if mem_total:
        axes[1, 1].axhline(mem_total / 2**30, color="#999", ls="--", lw=1, label="total")
    for ax in axes.flat:
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _plot(ax, xs, ys, colour, label, style="-", marker=None):
    pts = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None]
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=colour, label=label, lw=1.4,
                marker=marker, ms=3)


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


class RecordingFrontend:
    """A stand-in front end (tests, the benchmark): records every message the kernel sends
    to the widget, and can answer like the real view does ("ready", "stop")."""

    def __init__(self):
        import uuid

        self.comm_id = uuid.uuid4().hex
        self.messages: list[tuple[dict, list[bytes]]] = []
        self._handler = None

    def on_msg(self, callback) -> None:
        self._handler = callback

    def send(self, data=None, metadata=None, buffers=None) -> None:
        self.messages.append((data, [bytes(b) for b in (buffers or [])]))

    def close(self, *args, **kwargs) -> None:
        pass

    def answer(self, content: dict) -> None:
        """Deliver a custom message from the 'front end' to the kernel-side widget."""
        self._handler({"content": {"data": {"method": "custom", "content": content}}, "buffers": []})

    @property
    def deltas(self) -> list[tuple[dict, list[bytes]]]:
        return [(d["content"], b) for d, b in self.messages
                if d.get("method") == "custom" and d["content"].get("type") == "delta"]


# --------------------------------------------------------------------------- one run
class Dashboard:
    """Follows one run's events: live deltas in ``live`` mode, a static picture always."""

    def __init__(self, run, mode: str = "static", blocking: bool = True, sink=None):
        self.run, self.mode, self.blocking = run, mode, blocking
        self.events: list[dict] = []
        self.pending: list[dict] = []
        self.pending_eval: list[dict] = []
        self.last_send = 0.0
        self.messages = 0
        self.max_steps = 0
        self.mem_total = 0.0
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
    def _bundle(self, with_png: bool) -> dict[str, Any]:
        data: dict[str, Any] = {"text/plain": f"{self.run.name}: {self.run.status}"}
        summary = {**self.run.summary, "status": self.run.status}
        picture = ""
        if with_png:
            png = base64.b64encode(render_png({self.run.name: self.events}, self.mem_total,
                                              self.warmup_steps)).decode()
            data["image/png"] = png
            # Front ends show one mime type per output, and most rank HTML above PNG: the
            # HTML carries the picture too, so whichever they pick shows the plots.
            picture = f"<img src='data:image/png;base64,{png}' style='max-width:100%'/>"
        data["text/html"] = (f"<div><b>{html.escape(self.run.name)}</b></div>" + picture
                             + render_table({self.run.name: summary}))
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
            self.finish()

    def flush(self) -> None:
        """Send the points not yet sent: one message, float32 buffers."""
        import numpy as np

        if self.widget is None or not (self.pending or self.pending_eval):
            return
        train, evals = self.pending, self.pending_eval
        if len(train) > MAX_POINTS:  # keep messages small: thin out, always keep the newest
            stride = len(train) / MAX_POINTS
            train = [train[int(i * stride)] for i in range(MAX_POINTS - 1)] + [train[-1]]
        rows = [[_nan(e.get(f)) if f != "warmup" else float(e.get("phase") == "warmup")
                 for f in TRAIN_FIELDS] for e in train]
        erows = [[_nan(e.get(f)) for f in EVAL_FIELDS] for e in evals[-MAX_POINTS:]]
        buffers = [np.asarray(rows, dtype=np.float32).reshape(-1).tobytes(),
                   np.asarray(erows, dtype=np.float32).reshape(-1).tobytes()]
        self.widget.send({"type": "delta", "run": self.run.name, "fields": list(TRAIN_FIELDS),
                          "n": len(rows), "efields": list(EVAL_FIELDS), "en": len(erows)}, buffers)
        self.pending, self.pending_eval = [], []
        self.last_send = time.monotonic()
        self.messages += 1

    def finish(self) -> None:
        """The end (or an error): last points, full history, final status, final picture."""
        if self.widget is not None:
            self.flush()
            self.widget.history = {self.run.name: history(self.events)}
            self.widget.status = self.run.status
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
    """Several runs side by side: ``.table`` (DataFrame); displays as one overlay chart."""

    def __init__(self, runs: list, table):
        self.runs, self.table = runs, table

    def __getitem__(self, key):
        return self.table[key]

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        events = {r.name: r.events for r in self.runs}
        mem_total = max((float(r.summary.get("mem_total") or 0) for r in self.runs), default=0)
        png = base64.b64encode(render_png(events, mem_total)).decode()
        data: dict[str, Any] = {
            "text/plain": self.table.to_string(),
            "text/html": (f"<img src='data:image/png;base64,{png}' style='max-width:100%'/>"
                          + render_table({r.name: {**r.summary, "status": r.status} for r in self.runs})),
            "image/png": png,
        }
        if frontend("auto") == "live":
            w = LiveChart(title=f"{len(self.runs)} runs", current="", status="compared",
                          stoppable=False, mem_total=mem_total,
                          history={r.name: history(r.events) for r in self.runs})
            data["application/vnd.jupyter.widget-view+json"] = {
                "version_major": 2, "version_minor": 0, "model_id": w.model_id}
        return data

    def __repr__(self) -> str:
        return self.table.to_string()
