"""The live dashboard: one display output per run, live while it trains, kernel-free after.

While the run trains its output holds a live anywidget (``js/src/``, bundled into
``assets/build/dashboard.js``) and a static PNG and figures table for front ends that draw no
widgets; at its end it is replaced by :func:`page.saved_output`, which holds no widget view.
:func:`frontend` decides once per run: ``live``, ``static`` (papermill, nbconvert: one display
handle refreshed at evaluations and the end) or ``text`` (outside IPython). Live updates carry
only new points, as float32 buffers, at most 4 messages a second.
"""

from __future__ import annotations

import base64
import html
import time
from pathlib import Path
from typing import Any

from .. import settings
from ..backends.registry import BACKENDS
from ..backends.registry import device as pick_device
from .chart import (
    EVAL_FIELDS,
    TRAIN_FIELDS,
    chart_spec,
    downsample,
    eval_metrics,
    history,
    marks,
    render_png,
    render_table,
)
from .page import asset, finite_json, saved_output, view_state
from .progress import TextProgress, in_notebook

MIN_INTERVAL = 0.25  # seconds between live messages: at most 4 a second
# Beside the live widget in its output: which run it shows. A notebook saved while the run
# trained and reopened after it ended holds a widget no kernel has; JupyterLab's extension
# (labextension/src/heal.ts) then puts the run's saved output there (saved_run_output).
RUN_MIME = "application/vnd.gaudi-workbench.run+json"
MAX_POINTS = 36  # per message: 36 points x 12 float32 fields = 1.7 KB, under 2 KB

# the device counts a live view shows (cumulative at the latest event)
COUNTED = ("cpu_fallbacks", "host_syncs", "compiles", "graph_breaks")


def frontend(live: str | bool = "auto") -> str:
    """'live', 'static' or 'text': where and how progress can be shown, decided once. A user's
    kernel has ``JPY_SESSION_NAME`` (Jupyter Server) or ``VSCODE_PID``; papermill's and
    nbconvert's have neither, and nothing live is sent there.
    """
    if live is False:
        return "off"
    if not in_notebook():
        return "text"
    if live is True:
        return "live"
    watched = any(settings.get(v) for v in ("JPY_SESSION_NAME", "VSCODE_PID"))
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
        """The live chart. Deltas arrive through ``send``; history and summary at the end."""

        _esm = asset("dashboard.js")  # the view injects its stylesheet (bundled with it) itself
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
        summary = t.Dict({}).tag(sync=True)  # the run's summary.json, once it ended
        # what to draw and how: chart_spec, which render_png draws from too
        chart = t.Dict(chart_spec()).tag(sync=True)

    return LiveChart


_WIDGET = None


def LiveChart(**kwargs):  # noqa: N802 (a class built on first use, so anywidget loads lazily)
    global _WIDGET
    if _WIDGET is None:
        _WIDGET = _widget_class()
    return _WIDGET(**kwargs)


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
        self.marks: dict = {}  # the fields seen so far (chart.marks): what the panels draw
        self.device = ""
        # a submitted run's job as its scheduler has it ("slurm job 12: RUNNING on n[1-2]"),
        # shown beside the device; ``queued`` while the job waits for its nodes
        self.job, self.queued = "", False
        self.warmup_steps = run.spec.args.throughput_warmup_steps or 0
        self.handle = None
        self.widget = None
        if mode == "live":
            self.widget = LiveChart(
                title=run.name,
                current=run.name,
                kernel_id=_kernel_id(),
                blocking=blocking,
                warmup_steps=self.warmup_steps,
            )
            self.widget.on_msg(self._on_msg)
            if sink is not None:  # tests and the benchmark: a stand-in front end
                self.widget.comm = sink

    # ------------------------------------------------------------------ display
    def figures(self) -> dict[str, Any]:
        """The table's figures: the run's summary once it ended, before that the latest events."""
        if self.summary is not None:
            return self.summary
        last = next((e for e in reversed(self.events) if e.get("phase") in ("warmup", "train")), {})
        evals = next((e for e in reversed(self.events) if e.get("phase") == "eval"), {})
        return {
            "status": "queued" if self.queued else "running",
            "step": last.get("step"),
            "train_loss": last.get("loss"),
            "eval": {k.removeprefix("eval_"): v for k, v in evals.items() if k.startswith("eval_")},
            "tokens_per_s": last.get("tokens_per_s"),
            "samples_per_s": last.get("samples_per_s"),
            # cumulative device counts at the latest event (the summary: after warm-up)
            "counts": {k: last.get(k) for k in COUNTED}
            if any(last.get(k) is not None for k in COUNTED)
            else None,
        }

    def _bundle(self, with_png: bool) -> dict[str, Any]:
        figures = self.figures()
        data: dict[str, Any] = {"text/plain": f"{self.run.name}: {figures.get('status')}"}
        picture = ""
        if with_png:
            png = base64.b64encode(
                render_png({self.run.name: self.events}, self.mem_total, self.warmup_steps)
            ).decode()
            data["image/png"] = png
            # Front ends show one mime type per output, and most rank HTML above PNG: the
            # HTML carries the picture too, so whichever they pick shows the plots.
            picture = f"<img src='data:image/png;base64,{png}' style='max-width:100%'/>"
        job = f" · {html.escape(self.job)}" if self.job else ""
        data["text/html"] = (
            f"<div><b>{html.escape(self.run.name)}</b>{job}</div>"
            + picture
            + render_table({self.run.name: figures})
        )
        if self.widget is not None:
            data[RUN_MIME] = {"path": str(Path(self.run.path).resolve())}
            data["application/vnd.jupyter.widget-view+json"] = {
                "version_major": 2,
                "version_minor": 0,
                "model_id": self.widget.model_id,
            }
        return data

    def show(self) -> None:
        from IPython.display import display

        self.handle = display(self._bundle(with_png=False), raw=True, display_id=True)

    def refresh(self) -> None:
        """Redraw the static part (and keep the widget) through the one display handle."""
        if self.handle is not None:
            self.handle.update(self._bundle(with_png=bool(self.events)), raw=True)

    def device_line(self) -> str:
        """The header's device, and a submitted run's job beside it."""
        return " · ".join(part for part in (self.device, self.job) if part)

    # ------------------------------------------------------------------ events
    def __call__(self, event: dict) -> None:
        phase = event.get("phase")
        if phase == "job":  # from the process following a submitted run: never in a file
            self.job, self.queued = str(event.get("job", "")), bool(event.get("waiting"))
            if self.widget is not None and self.summary is None:
                self.widget.device = self.device_line()
                self.widget.status = "queued" if self.queued else "running"
            elif self.widget is None:
                self.refresh()
            return
        if phase == "start":
            self.max_steps = int(event.get("max_steps") or 0)
            self.mem_total = float(event.get("mem_total") or 0)
            self.device = str(event.get("device", ""))
            self.queued = False
            if self.widget is not None:
                w = self.widget
                w.max_steps, w.mem_total = self.max_steps, self.mem_total
                w.device, w.status = self.device_line(), "running"
                w.chart = self.chart()
            return
        if phase in ("warmup", "train", "eval"):
            self.events.append(event)
            (self.pending_eval if phase == "eval" else self.pending).append(event)
            self._new_fields(event)
            if self.widget is not None and time.monotonic() - self.last_send >= MIN_INTERVAL:
                self.flush()
            if phase == "eval" and self.widget is None:
                self.refresh()
            return
        # kept for the picture and the saved view; the live view gets it once
        if phase == "samples":
            self.events.append(event)
            if self.widget is not None:
                self.send_samples(event)
            else:
                self.refresh()
            return
        if phase == "end":
            self.finish(event)

    def chart(self) -> dict[str, Any]:
        """What the view draws (``chart_spec``) for the events so far."""
        return chart_spec({self.run.name: self.marks}, self.mem_total, self.warmup_steps)

    def _new_fields(self, event: dict) -> None:
        """A field seen (or non-zero) for the first time redraws the view's panels: an eval
        metric gets its panel, an optional one appears, a panel's title and series follow."""
        before = dict(self.marks)
        if marks([event], self.marks) != before and self.widget is not None:
            if event.get("phase") == "eval":
                self.flush()  # a new metric's points go with its panel
            self.widget.chart = self.chart()

    def flush(self) -> None:
        """Send the points not yet sent: one message, float32 buffers."""
        import numpy as np

        if self.widget is None or not (self.pending or self.pending_eval):
            return
        efields = (*EVAL_FIELDS, *eval_metrics(self.marks))
        train = downsample(self.pending, MAX_POINTS)  # keep messages small
        evals = downsample(self.pending_eval, MAX_POINTS)
        rows = [
            [
                _nan(e.get(f)) if f != "warmup" else float(e.get("phase") == "warmup")
                for f in TRAIN_FIELDS
            ]
            for e in train
        ]
        erows = [[_nan(e.get(f)) for f in efields] for e in evals]
        buffers = [
            np.asarray(rows, dtype=np.float32).reshape(-1).tobytes(),
            np.asarray(erows, dtype=np.float32).reshape(-1).tobytes(),
        ]
        self.widget.send(
            {
                "type": "delta",
                "run": self.run.name,
                "fields": list(TRAIN_FIELDS),
                "n": len(rows),
                "efields": list(efields),
                "en": len(erows),
            },
            buffers,
        )
        self.pending, self.pending_eval = [], []
        self.last_send = time.monotonic()
        self.messages += 1

    def send_samples(self, event: dict) -> None:
        """One sample grid to the view: its step and prompts, the PNG as a binary buffer."""
        assert self.widget is not None  # a live view's
        self.widget.send(
            {
                "type": "samples",
                "run": self.run.name,
                "step": event.get("step"),
                "prompts": event.get("prompts") or [],
                "columns": event.get("columns") or 1,
            },
            [base64.b64decode(event["image"])],
        )
        self.messages += 1

    def state(self) -> dict[str, Any]:
        """What the view draws at the end: the live widget's traits, with the whole history."""
        return view_state(
            {self.run.name: self.events},
            {self.run.name: self.figures()},
            title=self.run.name,
            current=self.run.name,
            status=self.figures().get("status", ""),
            max_steps=self.max_steps,
            warmup_steps=self.warmup_steps,
            device=self.device_line(),
            mem_total=self.mem_total,
        )

    def finish(self, event: dict | None = None) -> None:
        """The end (or an error): the summary, then the output becomes the saved view."""
        self.summary = dict(self.run.summary)  # written before the end event: read once, here
        if event and event.get("status"):
            self.summary["status"] = event["status"]
        holds = holding(self.device)
        if holds:  # trained in this kernel on a Gaudi: the card stays taken until it restarts
            self.device = f"{self.device} · {holds}"
        if self.widget is not None:
            self.flush()
            w = self.widget
            w.device = self.device_line()
            w.history = {self.run.name: history(self.events)}
            w.summary, w.status = finite_json(self.summary), self.summary.get("status", "")
        if self.handle is not None:
            self.handle.update(
                saved_output(
                    {self.run.name: self.events},
                    {self.run.name: self.summary},
                    self.state(),
                    heading=self.run.name,
                ),
                raw=True,
            )

    def _on_msg(self, widget, content, buffers) -> None:
        if isinstance(content, dict) and content.get("type") == "stop":
            self.run.stop()


def saved_run_output(run) -> dict[str, Any]:
    """The output a finished run's dashboard leaves, read back from its directory ``run``
    (a ``RunDir``): the same saved view and picture, for a notebook saved mid-run."""
    events = run.events
    start = next((e for e in events if e.get("phase") == "start"), {})
    summary = {**run.summary, "status": run.status}
    state = view_state(
        {run.name: events},
        {run.name: summary},
        title=run.name,
        current=run.name,
        status=run.status,
        max_steps=int(start.get("max_steps") or 0),
        warmup_steps=run.spec.args.throughput_warmup_steps or 0,
        device=str(start.get("device", "")),
        mem_total=float(start.get("mem_total") or 0),
    )
    return saved_output({run.name: events}, {run.name: summary}, state, heading=run.name)


def holding(kind: str) -> str:
    """What this process holds of device kind ``kind`` ("this kernel holds Gaudi 0 (module 3)
    since 10:42; restart the kernel to free it"), read from the OS; "" where nothing stays held."""
    b = BACKENDS.get(kind.split(":")[0])
    if b is None or b.deploy.visible_env is None or not b.calls.available():
        return ""
    return pick_device(b.kind).holding or ""


def _nan(v: Any) -> float:
    return float("nan") if v is None else float(v)


def attach(
    run, live: str | bool = "auto", background: bool = False, text_bar: bool = False
) -> Dashboard | None:
    """Give ``run`` one fresh display (a resumed run gets one, not two): ``live(run)`` for a
    callable, else the live widget, static picture or text line (``text_bar``: a tqdm bar
    shows the progress, the text gives whole lines only); the Dashboard, if any."""
    run.log.subscribers.clear()
    mode = "off" if callable(live) else frontend(live)
    if callable(live):
        live(run)  # a display of the caller's own: it subscribes itself
    elif mode == "text":
        run.subscribe(TextProgress(run, bar=text_bar))
    if mode in ("off", "text"):
        return None
    dash = Dashboard(run, mode=mode, blocking=not background)
    dash.show()
    run.subscribe(dash)
    return dash


# --------------------------------------------------------------------------- comparison
class Comparison:
    """Several runs side by side: ``.table`` (DataFrame); displays as one overlay chart.

    The runs' events and summaries are read once, here: displaying it reads no file."""

    def __init__(self, runs: list, table):
        self.runs, self.table = runs, table
        # the table's column names: the same run twice gets two names ("name", "name #2")
        names = (
            [str(c) for c in table.columns]
            if len(table.columns) == len(runs)
            else [r.name for r in runs]
        )
        self.events = {n: r.events for n, r in zip(names, runs)}
        self.summaries = {n: {**r.summary, "status": r.status} for n, r in zip(names, runs)}

    def __getitem__(self, key):
        return self.table[key]

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        """The overlay as a saved view (interactive where scripts run, a picture elsewhere)."""
        mem_total = max(
            (float(s.get("mem_total") or 0) for s in self.summaries.values()), default=0
        )
        state = view_state(
            self.events,
            self.summaries,
            title=f"{len(self.runs)} runs",
            status="compared",
            mem_total=mem_total,
        )
        data = saved_output(self.events, self.summaries, state)
        data["text/plain"] = self.table.to_string()
        return data

    def __repr__(self) -> str:
        return self.table.to_string()
