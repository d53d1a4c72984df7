"""Runs: a directory per training run that outlives the kernel (``spec.json``, ``events.jsonl``,
``summary.json``, ``checkpoints/``; docs/runs.md), and the event log.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import warnings
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from .. import markup
from ..jsonvalues import plain
from ..settings import runs_root, runs_root_named
from .events import read_events
from .job import job_state
from .lock import WriterLock
from .spec import RunSpec

STOP_FILE = "STOP"  # a file of this name in a run directory stops the run (every rank reads it)


def now() -> str:
    """The local time as an ISO string, to the second."""
    return datetime.now().isoformat(timespec="seconds")


def _clean(value: Any) -> Any:
    """JSON-safe for the run's files: NaN/inf kept as text (``jsonvalues``' "text" rule)."""
    return plain(value, nonfinite="text")


def write_json(path: Path, data: dict) -> None:
    """Write atomically (``write_whole``)."""
    write_whole(path, json.dumps(_clean(data), indent=2, sort_keys=True, default=str) + "\n")


def write_whole(path: Path, text: str | bytes) -> None:
    """Write ``path`` whole through a temporary file and ``os.replace``, so a killed process
    never leaves half a file (nor, on a full disk, an empty temporary one)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(text.encode() if isinstance(text, str) else text)
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.filename is None:  # a failed write names no file: this one
            e.filename = str(path)
        raise


class EventLog:
    """Appends events to ``events.jsonl`` (flushed per event) and hands them to subscribers."""

    def __init__(self, path: Path):
        self.path = path
        self.subscribers: list[Callable[[dict], None]] = []
        self._lock = threading.Lock()

    def emit(self, event: dict) -> None:
        """Append ``event`` as one whole line and hand it to the subscribers. A write that
        fails (a full disk) is taken back to the last whole line, the subscribers still get
        the event, and the error is raised."""
        event = _clean(event)
        data = (json.dumps(event, sort_keys=True) + "\n").encode()
        failed = None
        with self._lock, open(self.path, "ab", buffering=0) as f:
            start = f.seek(0, os.SEEK_END)
            try:
                view = memoryview(data)
                while view:  # an unbuffered write may take part of the line
                    view = view[f.write(view) :]
            except OSError as e:
                # never half a line: the next one would be lost with it
                os.truncate(self.path, start)
                e.filename = e.filename or str(self.path)
                failed = e
        for fn in list(self.subscribers):
            fn(event)
        if failed is not None:
            raise failed

    def tell(self, event: dict) -> None:
        """Hand ``event`` to the subscribers without logging it (a resume taken back)."""
        for fn in list(self.subscribers):
            fn(_clean(event))

    def read(self) -> list[dict]:
        """Every event logged so far (``rundir.events``: the one reader of the file)."""
        return read_events(self.path)

    def restore(self, data: bytes) -> None:
        """Put back the log's lines as ``data`` (a failed resume's: as read before it began)."""
        write_whole(self.path, data)

    def truncate_after(self, step: int) -> None:
        """Drop events past ``step`` (those logged after the checkpoint a resume starts from)."""
        keep = [e for e in self.read() if e.get("step", 0) <= step]
        write_whole(self.path, "".join(json.dumps(e, sort_keys=True) + "\n" for e in keep))


class NullLog(EventLog):
    """The event log of a non-zero rank: events go to subscribers only, never to disk."""

    def __init__(self):
        super().__init__(Path("/dev/null"))

    def emit(self, event: dict) -> None:
        self.tell(event)


def check_root(run_dir: str | Path | None = None) -> Path:
    """The directory new runs go under (``run_dir``, else ``$WORKBENCH_RUNS``, else ``./runs``),
    checked to be one this process can create directories in before anything is written."""
    root = runs_root(run_dir)
    base = root.absolute()
    while not base.exists() and base != base.parent:  # the part of the path that exists
        base = base.parent
    why = None
    if not base.is_dir():
        why = f"{base} is a file, not a directory"
    else:
        import tempfile

        try:  # only trying tells (/proc says it is writable; root ignores permission bits)
            os.rmdir(tempfile.mkdtemp(prefix=".workbench-probe-", dir=base))
        except OSError as e:
            why = f"cannot create a directory in {base}: {e.strerror}"
    if why is not None:
        named = runs_root_named(run_dir)
        raise ValueError(
            f"{named}={str(root)!r} cannot hold run directories: {why}. Pass run_dir= a directory "
            f"you can write to"
        )
    return root


def new_run_dir(name: str, root: str | Path | None = None) -> Path:
    """A fresh directory ``<root>/<timestamp>-<name>``; a name too long for the filesystem is
    shortened (with a warning) to its start and a hash of the whole."""
    root = runs_root(root)
    root.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
    try:
        limit = os.pathconf(root, "PC_NAME_MAX")
    except (AttributeError, OSError, ValueError):  # no pathconf (Windows): the common limit
        limit = 255
    room = limit - len(f"{stamp}--999")  # the timestamp and a counter for same-second runs
    if len(safe.encode()) > room:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        safe = safe.encode()[: room - len(digest) - 1].decode(errors="ignore") + "-" + digest
        warnings.warn(
            f"run name of {len(name)} characters ({len(name.encode())} bytes) is longer than a "
            f"directory name may be here ({limit} bytes with the timestamp): shortened to {safe!r}",
            UserWarning,
            stacklevel=2,
        )
    for i in range(1000):
        path = root / (f"{stamp}-{safe}" + (f"-{i}" if i else ""))
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a run directory under {root}")


class RunDir:
    """One run directory, read side: spec, status, events, checkpoints, the trained model.

    It never trains and never writes a run's state; ``engine.Run`` (``wb.Run``) adds the
    live handle (stop, wait, resume, the trainer) on top of it.

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
        self._spec: RunSpec | None = None
        # (stat key, parsed)
        self._summary: tuple[tuple[int, int, int], dict[str, Any]] | None = None
        self._loaded: tuple[Any, Any] | None = None  # (model, tokenizer): types by task

    # ----------------------------------------------------------------- opening
    @classmethod
    def open(cls, path: str | Path):
        """Reopen a run directory (after a kernel restart, or from another process)."""
        path = Path(path)
        if not (path / "spec.json").exists() and not (path / "summary.json").exists():
            raise FileNotFoundError(f"{str(path)!r} is not a run directory (no spec.json)")
        # a summary without a spec: a run killed as it was created (it reads failed)
        return cls(path)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def spec(self) -> RunSpec:
        """spec.json as its record, read once (upgraded from an older version; a value of the
        wrong type refused). A frozen record: editing a copy changes nothing on disk."""
        if self._spec is None:
            path = self.path / "spec.json"
            try:
                text = path.read_text()
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"{self.name} has no spec.json: the process creating it died before "
                    f"writing it (the run reads {self.status}); start a new run"
                ) from None
            try:
                raw = json.loads(text)
            except ValueError as e:
                raise ValueError(f"{path} is not JSON ({e}): a run directory cut short?") from None
            self._spec = RunSpec.read(raw, str(path))
        return self._spec

    @property
    def task(self) -> str | None:
        return self.spec.task

    @property
    def summary(self) -> dict[str, Any]:
        """summary.json; parsed again only when the file changed (one stat per read)."""
        p = self.path / "summary.json"
        try:
            st = p.stat()
        except FileNotFoundError:
            return {"status": "running"}
        key = (st.st_ino, st.st_mtime_ns, st.st_size)  # every write replaces the file
        if self._summary is None or self._summary[0] != key:
            self._summary = (key, json.loads(p.read_text()))
        return dict(self._summary[1])

    @property
    def status(self) -> str:
        """``prepared`` (written, never started), ``running``, ``completed``, ``stopped`` or
        ``failed``.

        A run is ``running`` only while a process holds its write lock: ``running`` with the
        lock free, or ``prepared`` once a trainer claimed it or its preparing process is gone,
        reads ``failed``. A run prepared for others (``wb.launch_command``) stays ``prepared``.
        """
        summary = self.summary
        status = summary.get("status", "running")
        if status in ("running", "prepared"):
            lock = WriterLock(self.path)
            if lock.busy():
                return "running"
            if status == "running" or lock.path.exists() or not _alive(summary):
                return "failed"
        return status

    @property
    def step(self) -> int:
        """The last step the run reached: the summary's, or the event log's for a run that died."""
        s = self.summary
        if s.get("ended") and s.get("step") is not None:
            return int(s["step"])
        steps = [e["step"] for e in self.events if isinstance(e.get("step"), int)]
        return max(steps, default=int(s.get("step") or 0))

    @property
    def events(self) -> list[dict]:
        return self.log.read()

    @property
    def metrics(self):
        import pandas as pd

        return pd.DataFrame(self.events)

    def _saved(self) -> list[Path]:
        found = [
            p
            for p in (self.path / "checkpoints").glob("checkpoint-*")
            if p.name.split("-")[-1].isdigit()
        ]
        return sorted(found, key=lambda p: int(p.name.split("-")[-1]))

    @property
    def checkpoints(self) -> list[Path]:
        """The checkpoints a run can resume from: those whose files parse, oldest first."""
        from .checkpoint import problem

        return [p for p in self._saved() if problem(p) is None]

    @property
    def broken_checkpoints(self) -> dict[str, str]:
        """Checkpoint directories that cannot be resumed from, with the reason (a kill while
        saving)."""
        from .checkpoint import problem

        return {p.name: why for p in self._saved() if (why := problem(p)) is not None}

    @property
    def last_checkpoint(self) -> Path | None:
        good = self.checkpoints
        return good[-1] if good else None

    def stop(self) -> None:
        """Ask the process that trains this run to stop after its current step, with a
        checkpoint: writes the STOP file, which every rank reads (from any process)."""
        if self.summary.get("status") in ("running", "prepared"):
            (self.path / STOP_FILE).touch()

    def refresh(self) -> None:
        """Forget the parsed spec and summary (after this process rewrote them)."""
        self._spec = self._summary = None

    def subscribe(self, fn: Callable[[dict], None]) -> None:
        """Call ``fn(event)`` for every event this process emits from now on (and, for a Slurm
        run, ``{"phase": "job", "job": line, "waiting": bool}`` as the job's state changes)."""
        self.log.subscribers.append(fn)

    # ----------------------------------------------------------------- results
    def model_spec(self, trust_remote_code: bool = False):
        """The run's ``ModelSpec``, with ``trust_remote_code`` the caller's: a run directory is
        data (shared, downloaded), so what its spec.json says never turns remote code on."""
        from ..catalog.modelspec import ModelSpec

        return ModelSpec.from_dict({**self.spec.model, "trust_remote_code": trust_remote_code})

    def _load(self):
        if self._loaded is None:
            from .checkpoint import load_checkpoint

            ckpt = self.last_checkpoint
            if ckpt is None:
                raise FileNotFoundError(f"{self.name} has no checkpoint yet")
            self._loaded = load_checkpoint(self.model_spec(), ckpt, base=self.path / "base")
        return self._loaded

    def hold(self, model, tokenizer) -> None:
        """Keep the model in memory (the process that trains it): ``model`` is then this one."""
        self._loaded = (model, tokenizer)

    @property
    def model(self):
        """The trained model (in memory, or loaded from the last checkpoint)."""
        return self._load()[0]

    @property
    def tokenizer(self):
        return self._load()[1]

    def sample(
        self,
        n: int | str | list[str] = 16,
        steps: int | None = None,
        seed: int = 0,
        guidance: float = 7.5,
    ):
        """Generate images (PIL), deterministic for a ``seed``.

        Diffusion runs: ``n`` images, DDIM in ``steps`` (default 50). Text-to-image runs:
        ``run.sample(prompts, steps=25, guidance=7.5, seed=0)``, one image per prompt
        (``guidance``: the classifier-free guidance scale; 1 turns it off).
        """
        if self.task == "text_to_image":
            return self.model.sample(n, steps=steps or 25, guidance=guidance, seed=seed)
        if self.task != "diffusion":
            raise ValueError(
                "run.sample() is for diffusion runs (and text-to-image runs); for language models "
                "use "
                "run.generate(prompts)"
            )
        return self.model.sample(n, steps=steps or 50, seed=seed)

    def generate(self, prompts: str | list[str], max_new_tokens: int = 32, **options) -> list[str]:
        """Continue each prompt with the trained language model (``causal_lm`` and ``seq2seq``
        runs); ``options`` go to transformers' ``generate`` (``do_sample=True``,
        ``temperature``, ``top_k``, ...). Returns the decoded texts, one per prompt.

        In HPU lazy mode a causal model generates with static shapes (``rundir.generation``)
        when ``options`` are only ``do_sample``, ``temperature``, ``top_k``, ``top_p``.
        """
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        from ..backends.registry import compiles_per_shape, step_marker
        from . import generation

        if self.task not in ("causal_lm", "seq2seq"):
            raise ValueError(
                f"run.generate() is for language-model runs (causal_lm, seq2seq), not "
                f"{self.task!r} runs; for images use run.sample()"
            )
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        model, tok = self.model.eval(), self.tokenizer
        mark_step = step_marker(model.device)

        class EachToken(StoppingCriteria):
            # Called once per generated token, after it is appended; never stops generation.
            # optimum-habana marks each step of its loop in lazy mode
            # (transformers/generation/utils.py @ 1d8504c, lines 2776-2778).
            def __call__(self, input_ids, scores, **kw):
                mark_step()
                return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

        static = (
            self.task == "causal_lm"
            and compiles_per_shape(model.device)
            and generation.supports(options)
        )
        out = []
        for prompt in prompts:
            ids = tok(prompt, return_tensors="pt").input_ids
            if static:
                tokens = generation.generate(
                    model,
                    ids,
                    max_new_tokens,
                    mark_step,
                    pad_token_id=next(
                        (t for t in (tok.pad_token_id, tok.eos_token_id) if t is not None), 0
                    ),
                    eos_token_id=tok.eos_token_id,
                    **options,
                )
                out.append(tok.decode(tokens[0], skip_special_tokens=True))
                continue
            ids = ids.to(model.device)
            tokens = model.generate(
                ids,
                max_new_tokens=max_new_tokens,
                pad_token_id=tok.pad_token_id,
                stopping_criteria=StoppingCriteriaList([EachToken()]),
                **options,
            )
            out.append(tok.decode(tokens[0], skip_special_tokens=True))
        return out

    def __repr__(self) -> str:
        s = self.summary
        return f"Run({self.name}, status={self.status}, step={self.step}/{s.get('max_steps', '?')})"

    def row(self) -> dict[str, Any]:
        """The run in one row, as ``runs()`` and ``compare()`` show it (eval metrics too)."""
        s = self.summary
        # a run killed as it was made has a summary and no spec yet
        spec = self.spec if (self.path / "spec.json").exists() else None
        model = model_name(spec.model) if spec is not None else None
        return {
            "run": self.name,
            "status": self.status,
            "model": model,
            "data": spec.data.get("source") if spec is not None else None,
            "step": self.step,
            "train_loss": s.get("train_loss"),
            "samples_per_s": s.get("samples_per_s"),
            "tokens_per_s": s.get("tokens_per_s"),
            "peak_memory": s.get("mem_peak"),
            "device": (s.get("device") or {}).get("kind"),
            "wall_time_s": s.get("wall_time_s"),
            "path": str(self.path),
            **(s.get("eval") or {}),
        }

    def _repr_html_(self) -> str:
        s = self.summary
        rows = {
            "run": self.name,
            "status": self.status,
            "step": f"{self.step}/{s.get('max_steps', '?')}",
            "train loss": s.get("train_loss"),
            "eval": s.get("eval"),
            "tokens/s": s.get("tokens_per_s"),
            "wall time (s)": s.get("wall_time_s"),
            "path": str(self.path),
        }
        return markup.key_values((k, _fmt(v)) for k, v in rows.items())


def model_name(model: dict[str, Any]) -> str | None:
    """The model (a run spec's ``model``) as the run tables name it: ``family-size``, or an
    attached Trainer's model class (its spec's model has a ``name``); None when it names none."""
    if model.get("name"):
        return str(model["name"])
    return "-".join(str(model.get(k)) for k in ("family", "size")) if model else None


def _alive(summary: dict) -> bool:
    """Whether the process a summary names is still alive (True when none is named, or it runs
    on another host: nothing here can tell)."""
    import socket

    pid = summary.get("pid")
    if not isinstance(pid, int) or summary.get("host") != socket.gethostname():
        return True
    import psutil

    try:
        return abs(psutil.Process(pid).create_time() - float(summary.get("pid_started") or 0)) < 1.0
    except (psutil.Error, ValueError, TypeError):  # gone, or never readable
        return False


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt(x)}" for k, x in v.items())
    return "-" if v is None else str(v)


def runs(root: str | Path | None = None):
    """Every run under ``root`` (default ``./runs``) as a table, newest first. A ``root`` you
    name must be a folder: a misspelt one is an error, not an empty table."""
    import pandas as pd

    given, root = root, runs_root(root)
    if given is not None and not root.is_dir():
        what = "is a file, not a folder" if root.exists() else "does not exist"
        raise FileNotFoundError(
            f"root: {str(given)!r} {what}: pass the folder your runs are in (their run_dir=), "
            f"or nothing for {str(runs_root())!r}"
        )
    columns = [
        "run",
        "status",
        "model",
        "data",
        "step",
        "train_loss",
        "tokens_per_s",
        "device",
        "wall_time_s",
        "path",
    ]
    found = {p.parent for p in root.glob("*/spec.json")} | {
        p.parent for p in root.glob("*/summary.json")
    }
    opened = [RunDir(path) for path in sorted(found, reverse=True)]
    # a run submitted to Slurm: its job's state, asked once per listing (squeue)
    jobs = [job_state(r.path) for r in opened]
    evals = [
        ({**r.row(), "job": str(j) if j is not None else None}, r.summary.get("eval") or {})
        for r, j in zip(opened, jobs)
    ]
    # the evaluations' figures (summary.json's "eval"), as eval_<name> columns after the rest
    names = list(dict.fromkeys(k for _, e in evals for k in e))
    columns += ["job"] if any(j is not None for j in jobs) else []
    columns += [f"eval_{k}" for k in names]
    table = [{**row, **{f"eval_{k}": e.get(k) for k in names}} for row, e in evals]
    return pd.DataFrame([{k: r[k] for k in columns} for r in table], columns=columns)


def compare(*runs_: RunDir | str | Path):
    """Runs side by side: a ``Comparison`` whose ``.table`` is a DataFrame (a column per run, a
    row per summary figure); in a notebook one chart overlaying the runs. The runs come as
    arguments or as one list."""
    import pandas as pd

    from ..views.dashboard import Comparison

    if len(runs_) == 1 and isinstance(runs_[0], list | tuple):  # compare([a, b]): the runs
        runs_ = tuple(runs_[0])
    cols = {}
    opened = []
    for r in runs_:
        run = r if isinstance(r, RunDir) else RunDir.open(r)
        opened.append(run)
        row = run.row()
        row = {
            "model": row.pop("model"),
            "data": row.pop("data"),
            "status": row.pop("status"),
            "steps": row.pop("step"),
            **{k: v for k, v in row.items() if k not in ("run", "path")},
        }
        key, i = run.name, 2
        while key in cols:  # the same run twice still gets two columns
            key, i = f"{run.name} #{i}", i + 1
        cols[key] = row
    return Comparison(opened, pd.DataFrame(cols))


def monotonic() -> float:
    return time.perf_counter()
