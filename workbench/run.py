"""Runs: a directory per training run that outlives the kernel, and the event log.

``runs/<timestamp>-<name>/`` holds ``spec.json`` (model spec, data spec, arguments),
``events.jsonl`` (one plain-dict event per line, flushed as it happens), ``summary.json``
(status, final metrics, throughput, memory, device, versions) and ``checkpoints/``
(transformers checkpoints with safetensors weights).
"""

from __future__ import annotations

import json
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

DEFAULT_ROOT = "runs"
_ACTIVE: list[Run] = []  # runs training in this process, newest last (for %wb stop)


def _now() -> str:
    return datetime.now().isoformat(timespec="seconds")


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become strings, numpy/torch scalars become floats."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def write_json(path: Path, data: dict) -> None:
    """Write atomically, so a killed process never leaves half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(_clean(data), indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


class EventLog:
    """Appends events to ``events.jsonl`` (flushed per event) and hands them to subscribers."""

    def __init__(self, path: Path):
        self.path = path
        self.subscribers: list[Callable[[dict], None]] = []
        self._lock = threading.Lock()

    def emit(self, event: dict) -> None:
        event = _clean(event)
        line = json.dumps(event, sort_keys=True)
        with self._lock, open(self.path, "a") as f:
            f.write(line + "\n")
            f.flush()
        for fn in list(self.subscribers):
            fn(event)

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut short by a kill: ignore it
                continue
        return out

    def truncate_after(self, step: int) -> None:
        """Drop events past ``step`` (those logged after the checkpoint a resume starts from)."""
        keep = [e for e in self.read() if e.get("step", 0) <= step]
        tmp = self.path.with_name(".events.tmp")
        tmp.write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in keep))
        os.replace(tmp, self.path)


class NullLog(EventLog):
    """The event log of a non-zero rank: events go to subscribers only, never to disk."""

    def __init__(self):
        super().__init__(Path("/dev/null"))

    def emit(self, event: dict) -> None:
        for fn in list(self.subscribers):
            fn(_clean(event))


def new_run_dir(name: str, root: str | Path | None = None) -> Path:
    """A fresh directory ``<root>/<timestamp>-<name>``; never reuses an existing one."""
    root = Path(root or os.environ.get("WORKBENCH_RUNS", DEFAULT_ROOT))
    root.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
    for i in range(1000):
        path = root / (f"{stamp}-{safe}" + (f"-{i}" if i else ""))
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a run directory under {root}")


def _pid_alive(pid: int | None, host: str | None, started: float | None) -> bool:
    if not pid or host != socket.gethostname():
        return host != socket.gethostname()  # another machine: cannot tell, assume alive
    try:
        import psutil

        proc = psutil.Process(pid)
        return started is None or abs(proc.create_time() - started) < 2
    except Exception:
        return False


class Run:
    """One training run: its directory, status, events and (in this process) its trainer.

    Attributes
    ----------
    path : pathlib.Path
        The run directory.
    status : str
        ``running``, ``completed``, ``stopped`` or ``failed``.
    summary : dict
        Final metrics, throughput, peak memory, wall time, device, versions, status, error.
    metrics : pandas.DataFrame
        The events as a table, one row per event.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.log = EventLog(self.path / "events.jsonl")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._model = None
        self._tokenizer = None
        self.trainer = None  # the transformers.Trainer while this process trains the run
        self.dashboard = None
        self.callbacks: list = []  # extra TrainerCallbacks for this process's training
        self.process = None  # the torchrun process of a launched run
        self.error: BaseException | None = None

    # ----------------------------------------------------------------- opening
    @classmethod
    def open(cls, path: str | Path) -> Run:
        """Reopen a run directory (after a kernel restart, or from another process)."""
        path = Path(path)
        if not (path / "spec.json").exists():
            raise FileNotFoundError(f"{str(path)!r} is not a run directory (no spec.json)")
        return cls(path)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def spec(self) -> dict[str, Any]:
        return json.loads((self.path / "spec.json").read_text())

    @property
    def summary(self) -> dict[str, Any]:
        p = self.path / "summary.json"
        return json.loads(p.read_text()) if p.exists() else {"status": "running"}

    @property
    def status(self) -> str:
        s = self.summary
        status = s.get("status", "running")
        if status == "running" and not self.is_training and not _pid_alive(s.get("pid"), s.get("host"), s.get("pid_started")):
            return "failed"  # the process died without writing its end (SIGKILL, power loss)
        return status

    @property
    def is_training(self) -> bool:
        return self in _ACTIVE

    @property
    def events(self) -> list[dict]:
        return self.log.read()

    @property
    def metrics(self):
        import pandas as pd

        return pd.DataFrame(self.events)

    @property
    def checkpoints(self) -> list[Path]:
        ckpt = self.path / "checkpoints"
        found = [p for p in ckpt.glob("checkpoint-*") if (p / "trainer_state.json").exists()]
        return sorted(found, key=lambda p: int(p.name.split("-")[-1]))

    @property
    def last_checkpoint(self) -> Path | None:
        return self.checkpoints[-1] if self.checkpoints else None

    def subscribe(self, fn: Callable[[dict], None]) -> None:
        """Call ``fn(event)`` for every event this process emits from now on."""
        self.log.subscribers.append(fn)

    # ----------------------------------------------------------------- control
    def stop(self) -> None:
        """Stop after the current step and save a checkpoint (thread-safe)."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> Run:
        """Wait for a background run to finish; re-raises its error."""
        if self._thread is not None:
            self._thread.join(timeout)
        if self.error is not None and not isinstance(self.error, KeyboardInterrupt):
            raise self.error
        return self

    def resume(self, max_steps: int | None = None, **overrides) -> Run:
        """Continue from the last checkpoint (weights, optimizer, scheduler, data order).

        Parameters
        ----------
        max_steps : int, optional
            New total number of steps (default: the original target).
        """
        from .engine import _resume

        return _resume(self, max_steps=max_steps, **overrides)

    # ----------------------------------------------------------------- results
    def _load(self):
        if self._model is None:
            from .engine import load_model

            self._model, self._tokenizer = load_model(self)
        return self._model, self._tokenizer

    @property
    def model(self):
        """The trained model (in memory, or loaded from the last checkpoint)."""
        return self._load()[0]

    @property
    def tokenizer(self):
        return self._load()[1]

    def sample(self, n: int = 16, steps: int = 50, seed: int = 0):
        """Generate ``n`` images (diffusion runs): a list of PIL images."""
        if self.spec["model"]["task"] != "diffusion":
            raise ValueError("run.sample() is for diffusion runs; for language models use "
                             "run.model.generate(...) with run.tokenizer")
        return self.model.sample(n, steps=steps, seed=seed)

    def __repr__(self) -> str:
        s = self.summary
        return f"Run({self.name}, status={self.status}, step={s.get('step', 0)}/{s.get('max_steps', '?')})"

    def _repr_html_(self) -> str:
        import html

        s = self.summary
        rows = {"run": self.name, "status": self.status, "step": f"{s.get('step', 0)}/{s.get('max_steps', '?')}",
                "train loss": s.get("train_loss"), "eval": s.get("eval"), "tokens/s": s.get("tokens_per_s"),
                "wall time (s)": s.get("wall_time_s"), "path": str(self.path)}
        cells = "".join(f"<tr><td style='color:#666;padding:0 8px'>{html.escape(k)}</td>"
                        f"<td style='padding:0 8px'>{html.escape(_fmt(v))}</td></tr>" for k, v in rows.items())
        return f"<table style='font:12px sans-serif'>{cells}</table>"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt(x)}" for k, x in v.items())
    return "-" if v is None else str(v)


def runs(root: str | Path | None = None):
    """Every run under ``root`` (default ``./runs``) as a table, newest first."""
    import pandas as pd

    root = Path(root or os.environ.get("WORKBENCH_RUNS", DEFAULT_ROOT))
    rows = []
    for path in sorted(root.glob("*/spec.json"), reverse=True):
        run = Run(path.parent)
        s = run.summary
        rows.append({"run": run.name, "status": run.status, "model": run.spec["model"]["family"] + "-" + run.spec["model"]["size"],
                     "data": run.spec["data"]["source"], "step": s.get("step"), "train_loss": s.get("train_loss"),
                     "tokens_per_s": s.get("tokens_per_s"), "device": (s.get("device") or {}).get("kind"),
                     "wall_time_s": s.get("wall_time_s"), "path": str(run.path)})
    return pd.DataFrame(rows, columns=["run", "status", "model", "data", "step", "train_loss",
                                       "tokens_per_s", "device", "wall_time_s", "path"])


def compare(*runs_: Run | str | Path):
    """Runs side by side.

    Returns a ``Comparison``: ``.table`` is a DataFrame (one column per run, one row per
    summary figure); in a notebook it displays as one chart overlaying the runs.
    """
    import pandas as pd

    from .dashboard import Comparison

    cols = {}
    opened = []
    for r in runs_:
        run = r if isinstance(r, Run) else Run.open(r)
        opened.append(run)
        s = run.summary
        row = {"model": run.spec["model"]["family"] + "-" + run.spec["model"]["size"],
               "data": run.spec["data"]["source"], "status": run.status, "steps": s.get("step"),
               "train_loss": s.get("train_loss"), "samples_per_s": s.get("samples_per_s"),
               "tokens_per_s": s.get("tokens_per_s"), "peak_memory": s.get("mem_peak"),
               "wall_time_s": s.get("wall_time_s"), "device": (s.get("device") or {}).get("kind")}
        for k, v in (s.get("eval") or {}).items():
            row[k] = v
        key, i = run.name, 2
        while key in cols:  # the same run twice still gets two columns
            key, i = f"{run.name} #{i}", i + 1
        cols[key] = row
    return Comparison(opened, pd.DataFrame(cols))


def started(run: Run, info: dict) -> None:
    """Mark ``run`` as training in this process and write a 'running' summary."""
    import psutil

    _ACTIVE.append(run)
    summary = {**run.summary, **info, "status": "running", "error": None, "pid": os.getpid(),
               "host": socket.gethostname(), "pid_started": psutil.Process().create_time(),
               "started": run.summary.get("started") or _now()}
    write_json(run.path / "summary.json", summary)


def finished(run: Run, update: dict) -> None:
    if run in _ACTIVE:
        _ACTIVE.remove(run)
    write_json(run.path / "summary.json", {**run.summary, **update, "ended": _now()})


def active() -> Run | None:
    """The newest run training in this process, if any."""
    return _ACTIVE[-1] if _ACTIVE else None


def monotonic() -> float:
    return time.perf_counter()
