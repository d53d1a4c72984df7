"""A user's own ``transformers.Trainer``, attached: the run directory, the live view and Stop.

``wb.attach(trainer)`` or ``Trainer(..., callbacks=[wb.callback()])`` adds one
``TrainerCallback``, an ``Attachment``; nothing is subclassed or patched. It writes a run
directory (through ``rundir.writer``), shows ``wb.train``'s dashboard and hands every step to
the engine's ``callbacks.Events``. The checkpoints stay in the Trainer's ``output_dir``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import traceback
import warnings
import weakref
from pathlib import Path
from typing import Any, Literal

from transformers import TrainerCallback

from .. import runargs
from ..backends.registry import device as pick_device
from ..runargs import RunArgs
from ..rundir import run as runs
from ..rundir.lock import RunBusy
from ..rundir.run import STOP_FILE, NullLog
from ..rundir.spec import RunSpec
from ..rundir.writer import RunWriter, create, gone, this_process
from ..views.dashboard import attach as show
from . import logprinters, uncaught
from .callbacks import DistStop, Events, MarkStep
from .engine import Run, training
from .interrupts import Interrupts
from .recipe import auto_steps, live_gap, throughput_warmup
from .trainer import error_text, summary

# why an attached run cannot be rebuilt by Run.resume()
NOT_REBUILDABLE = (
    "it was trained by your own Trainer, and its spec describes that Trainer but "
    "cannot rebuild it (model code, data, collator and metrics are yours)"
)
TWICE = (
    "wb.callback() is on this Trainer twice (or with wb.attach): one training makes one run. "
    "Pass wb.callback() once"
)
# The attachment that writes the run of each TrainerState, weak both ways, by id (a
# TrainerState, a dataclass, cannot be a dict key): nothing is written into the Trainer.
_OWNERS: dict[int, tuple[weakref.ref, weakref.ref]] = {}


def _check(live, name, throughput_warmup_steps, run_dir) -> None:
    """Refuse bad arguments before anything is written, each naming the fix."""
    runargs.check_live(live)
    runargs.check_value("name", name)  # the checks wb.train makes of the same arguments
    runargs.check_value("throughput_warmup_steps", throughput_warmup_steps)
    runs.check_root(run_dir)


class Attachment(TrainerCallback):
    """The TrainerCallback that makes a run of a user's Trainer (built by ``callback()``).

    One ``trainer.train()`` is one run; ``run`` is the live ``wb.Run`` while it trains, and the
    last one after; a later ``trainer.evaluate()`` is added to that run. Under torchrun every
    rank holds one: rank 0 writes the run, and all ranks take the same decisions at every step
    (the Trainer's logging, evaluation and checkpointing are collective).
    """

    def __init__(
        self,
        *,
        name: str | None = None,
        run_dir: str | Path | None = None,
        live: str | bool = "auto",
        throughput_warmup_steps: int | None = None,
        trainer=None,
    ):
        self.name, self.run_dir, self.live = name, run_dir, live
        self.warmup = throughput_warmup_steps
        # known with wb.attach(trainer): its dataset sizes. A weak reference: the Trainer
        # holds this callback, and nothing here may keep the user's Trainer (or model) alive
        self._trainer = weakref.ref(trainer) if trainer is not None else None
        self.run: Run | None = None
        self.events: Events | None = None
        self._open: _Open | None = None  # the run being written (rank 0, while training)
        self._closer: weakref.finalize | None = None
        self._agree: DistStop | None = None  # every rank's stop request, joined (torchrun)
        self._group = None  # the gloo group the stop requests are joined over
        self._cadence = 1
        self._added_log: int | None = None  # the step whose log only the dashboard asked for
        self._marks: MarkStep | Literal[False] | None = None  # lazy mode's mark_step, once known
        self._in_training = False
        self._thread: threading.Thread | None = None  # the thread training began in (rank 0)

    @property
    def trainer(self):
        return self._trainer() if self._trainer is not None else None

    # ------------------------------------------------------------------ the run
    def _spec(self, args, state, model, loader, device) -> RunSpec:
        """What is known of a user's Trainer: its model's class and config, its arguments and
        its data's sizes; the run's ``args`` carry what the views read."""
        config = getattr(model, "config", None)
        trainer = self.trainer
        train_rows = _rows(
            getattr(trainer, "train_dataset", None) or getattr(loader, "dataset", None)
        )
        eval_rows = _rows(getattr(trainer, "eval_dataset", None))
        params = sum(p.numel() for p in model.parameters()) if model is not None else None
        batch = args.per_device_train_batch_size
        dataset = getattr(loader, "dataset", None)
        return RunSpec(
            attached={
                "rebuildable": False,
                "why": NOT_REBUILDABLE,
                "resume": f"trainer.train(resume_from_checkpoint=True) with the Trainer "
                f"that made it (its checkpoints are in {args.output_dir})",
            },
            model={
                "name": type(model).__name__,
                "class": f"{type(model).__module__}.{type(model).__qualname__}",
                "config": config.to_dict() if config is not None else None,
                "num_params": params,
                "task": _task(model),
            },
            data={
                "source": f"{type(dataset).__name__ if dataset is not None else 'own'}"
                f" ({train_rows} rows)",
                "train_rows": train_rows,
                "eval_rows": eval_rows,
            },
            args=RunArgs(  # as the user's Trainer has them: its own checks were made
                max_steps=state.max_steps,
                batch_size=batch,
                lr=args.learning_rate,
                seed=args.seed,
                precision="bf16" if args.bf16 else "fp16" if args.fp16 else "fp32",
                device=device.kind,
                log_every=self._cadence,
                throughput_warmup_steps=self.warmup,
            ),
            training_arguments=_arguments(args),
        )

    def _begin(self, args, state, model, loader) -> Events:
        """Every rank: the same cadence and stop agreement; rank 0: the run directory."""
        self._close("it was still open when the Trainer trained again (an error, likely)")
        device = _device_of(args)
        size = args.world_size
        self._cadence = auto_steps(state.max_steps)[0]
        self.warmup = throughput_warmup(self.warmup, self._cadence)  # as wb.train
        task = _task(model)
        # samples from the steps: the batches are the user's collator's, left as they are
        counter = _Steps(args.per_device_train_batch_size, _collate_fn(loader))
        stop_file = None
        if state.is_world_process_zero:
            spec = self._spec(args, state, model, loader, device)
            path = runs.new_run_dir(self.name or f"{spec.model['name']}-own", self.run_dir)
            create(path, spec, checkpoints=Path(args.output_dir).absolute())
            run = Run(path)
            self.run = run
            run.dashboard = show(
                run,
                self.live,
                background=threading.current_thread() is not threading.main_thread(),
                text_bar=not args.disable_tqdm,  # the Trainer's tqdm bar draws the progress
            )
            opened = _Open(run, RunWriter(run).claim(), contextlib.ExitStack(), device)
            opened.writer.begin_on(device, size)
            opened.stack.enter_context(training(run))  # %wb stop and Run.stop() find it
            opened.stack.enter_context(Interrupts(run))  # the first Ctrl-C stops, saving
            opened.output_dir = str(Path(args.output_dir).absolute())
            self._open = opened
            # ends the run as failed if the process exits, or the Trainer is dropped, while
            # it trains (an error left train()); holds the run, never the user's objects
            self._closer = weakref.finalize(self, _abandon, opened, None)
            self._thread = threading.current_thread()
            uncaught.watch(self)  # an exception that leaves train() ends the run with it
            log, stop, stop_file = run.log, run.stop_flag, path / STOP_FILE
        else:  # the other ranks write nothing; their events go nowhere
            log, stop = NullLog(), threading.Event()
        peers = self._peers(size)
        if self._open is not None:
            self._open.peers = peers
        elif peers is not None:  # should rank 0, the run's writer, die first: this rank ends it
            self._closer = weakref.finalize(self, _orphaned, peers, args.process_index)
        self.events = events = Events(
            log,
            stop,
            task,
            device,
            counter,
            args.per_device_train_batch_size,
            self.warmup,
            size,
            min_interval=device.backend.policy.log_interval_s if size == 1 else 0.0,
            stop_file=stop_file if size == 1 else None,
            save_last=False,
            gap=live_gap if size == 1 else None,  # the view's cadence, as wb.train's default
        )
        if self._open is not None:
            self._open.events = self.events
        self._agree = DistStop(stop, stop_file, 1, group=self._stop_group()) if size > 1 else None
        self._in_training = True
        return events

    def _peers(self, size: int) -> list[dict] | None:
        """Every rank's process, gathered over the host's gloo group as training begins, so
        that a run ended without its Trainer's end names the rank that died; None in one."""
        if size == 1:
            return None
        import torch.distributed as dist

        me = {"rank": dist.get_rank(), **this_process()}
        if self._open is not None:
            me["run"] = str(self._open.run.path)
        peers: list = [None] * dist.get_world_size()
        dist.all_gather_object(peers, me, group=self._stop_group())
        return peers

    def _stop_group(self):
        """The gloo group the ranks' stop requests are joined over, so that agreeing at every
        step never waits for the device (the Trainer's own when it is gloo already)."""
        import torch.distributed as dist

        if dist.get_backend() == "gloo":
            return None
        if self._group is None:
            self._group = dist.new_group(backend="gloo")
        return self._group

    def _end(self, state, status: str | None = None, error: str | None = None) -> None:
        opened, self._open = self._open, None
        uncaught.unwatch(self)
        if self._closer is not None:
            self._closer.detach()
            self._closer = None
        if opened is None:
            return
        events = opened.events
        stopped = opened.run.stop_flag.is_set()
        if status is None:
            status = "stopped" if stopped else "completed"
            if events is not None and events.nan_step is not None:
                status = "failed"
                error = (
                    f"the loss became {events.last.get('loss')} at step {events.nan_step}; "
                    f"training stopped"
                )
        opened.finish(state, status, error)

    def _close(self, why: str, tb: str | None = None) -> None:
        """End a run the Trainer never ended (an exception left ``train()``) as failed."""
        uncaught.unwatch(self)
        if self._closer is not None:
            self._closer.detach()
            self._closer = None
        opened, self._open = self._open, None
        if opened is not None:
            _abandon(opened, why, tb)

    def uncaught(self, error: BaseException, thread: threading.Thread) -> None:
        """``error`` went unhandled in ``thread`` (``uncaught``): when it left this
        attachment's ``train()`` there, the run ends failed with it and its traceback."""
        if thread is not self._thread or not self._raised_through(error):
            return
        opened = self._open
        text = error_text(error, opened.device) if opened is not None else repr(error)
        tb = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        self._close(text, tb)

    def _raised_through(self, error: BaseException) -> bool:
        """Whether ``error`` left this attachment's Trainer's ``train()`` (its traceback
        holds the frame of a Trainer that has this callback), not some later line."""
        import transformers

        tb = error.__traceback__
        while tb is not None:
            # f_locals only of train()'s frames, which ended: on a frame that still runs (the
            # caller's) it would keep a copy of its variables, the user's Trainer among them
            frame = tb.tb_frame
            trainer = frame.f_locals.get("self") if frame.f_code.co_name == "train" else None
            if isinstance(trainer, transformers.Trainer) and self in getattr(
                getattr(trainer, "callback_handler", None), "callbacks", ()
            ):
                return True
            tb = tb.tb_next
        return False

    def _evaluated(self, state, metrics, loader=None) -> None:
        """An evaluation after the run ended (``trainer.evaluate()`` after ``train()``):
        its event and the summary's ``eval``, written under the run's lock again."""
        run, events = self.run, self.events
        if run is None or events is None or not state.is_world_process_zero:
            return
        try:
            writer = RunWriter(run).claim("evaluate")
        except RunBusy as e:  # another process writes it now: its summary stays as it is
            warnings.warn(f"the evaluation is not recorded in {run.name}: {e}", stacklevel=2)
            return
        try:
            self._eval_rows(loader, writer)
            events.on_evaluate(None, state, None, metrics=metrics)
            writer.end({"eval": {**run.summary.get("eval", {}), **events.eval}})
        finally:
            writer.release()

    def _own(self, state) -> None:
        """Make this attachment the one that writes the run of ``state``'s training; a second
        one (or this one listed twice) is refused with the fix."""
        entry = _OWNERS.get(id(state))
        other = entry[1]() if entry is not None and entry[0]() is state else None
        if other is not None:
            if other._open is not None:  # training began: its run is written; it ends failed
                other._in_training = False
                other._end(state, "failed", TWICE)
            raise ValueError(TWICE)
        for key in [k for k, (s, a) in _OWNERS.items() if s() is None or a() is None]:
            del _OWNERS[key]
        _OWNERS[id(state)] = (weakref.ref(state), weakref.ref(self))

    # ------------------------------------------------------------------ the Trainer calls these
    def on_init_end(self, args, state, control, **kw):
        """``Trainer(callbacks=[...])`` calls this as it is built: a second attachment is
        refused there, before anything is written."""
        self._own(state)
        return control

    def _mark(self, args, state, control, **kw):
        """HPU lazy mode: the engine's ``MarkStep`` points (every rank)."""
        if self._marks is None:
            self._marks = MarkStep(_device_of(args)) if _device_of(args).mode == "lazy" else False
        if self._marks:
            self._marks._mark(args, state, control)
        return control

    on_substep_end = on_pre_optimizer_step = on_optimizer_step = on_prediction_step = _mark

    def on_train_begin(self, args, state, control, model=None, train_dataloader=None, **kw):
        self._own(state)  # callbacks added after the Trainer was built (trainer.add_callback)
        return self._begin(args, state, model, train_dataloader).on_train_begin(
            args, state, control, **kw
        )

    def on_step_begin(self, args, state, control, **kw):
        if events := self._live():
            events.on_step_begin(args, state, control, **kw)
        return control

    def on_step_end(self, args, state, control, **kw):
        if not (events := self._live()):
            return control
        # what the user's arguments decided (DefaultFlowCallback comes first in the list)
        asked = control.should_log
        if self._agree is not None:  # every rank, every step: the same stop decision
            self._agree.on_step_end(args, state, control)
        if state.global_step % self._cadence == 0:
            control.should_log = True  # the view's cadence (the same on every rank)
        control = events.on_step_end(args, state, control, **kw)
        self._added_log = state.global_step if control.should_log and not asked else None
        return control

    def added(self, state, logs) -> bool:
        """Whether ``logs`` is a training log this attachment added for its dashboard, one
        the user's logging arguments did not ask for (``quiet``'s printers skip it)."""
        return (
            self._added_log == state.global_step
            and "loss" in (logs or {})
            and not any(k.startswith("eval_") for k in logs)
        )

    def on_log(self, args, state, control, logs=None, **kw):
        if events := self._live():
            events.on_log(args, state, control, logs=logs, **kw)
        return control

    def on_evaluate(self, args, state, control, metrics=None, eval_dataloader=None, **kw):
        if events := self._live():
            self._eval_rows(eval_dataloader, self._open.writer if self._open else None)
            events.on_evaluate(args, state, control, metrics=metrics, **kw)
        else:
            self._evaluated(state, metrics, eval_dataloader)
        return control

    def _eval_rows(self, loader, writer: RunWriter | None) -> None:
        """The evaluation set's size, into the spec at its first evaluation where the Trainer
        was not known when the run began (``wb.callback()``: no Trainer is passed to it)."""
        run = self.run
        if writer is None or run is None or run.spec.data.get("eval_rows") is not None:
            return
        rows = _rows(getattr(loader, "dataset", None))
        if rows is not None:
            spec = run.spec
            writer.respec(spec.replace(data={**spec.data, "eval_rows": rows}))

    def on_save(self, args, state, control, **kw):
        if events := self._live():
            events.on_save(args, state, control, **kw)
        return control

    def on_train_end(self, args, state, control, **kw):
        self._in_training = False
        self._end(state)
        self._agree = None
        return control

    def _live(self) -> Events | None:
        """The events between on_train_begin and on_train_end (on every rank), else None."""
        return self.events if self._in_training else None

    def __repr__(self) -> str:
        where = f" -> {self.run.path}" if self.run is not None else ""
        return f"<workbench attachment{where}>"

    def _ipython_display_(self) -> None:
        """Nothing: ``wb.attach(trainer)`` as a cell's last line leaves no output (the run
        shows itself when training begins)."""


@dataclasses.dataclass
class _Open:
    """A run rank 0 is writing: what its end needs, and nothing of the user's."""

    run: Run
    writer: RunWriter
    stack: contextlib.ExitStack
    device: Any
    events: Events | None = None
    output_dir: str | None = None
    peers: list[dict] | None = None  # every rank's process, under torchrun (``_peers``)
    t0: float = dataclasses.field(default_factory=runs.monotonic)

    def finish(
        self,
        state,
        status: str,
        error: str | None,
        failed_rank: int | None = None,
        tb: str | None = None,
    ) -> None:
        end = summary(
            self.run,
            _Ran(state, None),
            self.device,
            self.events,
            status,
            error,
            tb,
            runs.monotonic() - self.t0,
        )
        end["output_dir"] = self.output_dir
        if failed_rank is not None:  # as a launched run's (scaleout.launcher)
            end["failed_rank"] = failed_rank
        self.writer.finish(end, self.run.log, ended=self.stack.close)


def _abandon(opened: _Open, why: str | None, tb: str | None = None) -> None:
    """End ``opened`` as failed: the Trainer never reached on_train_end (``why``: None from
    the finalizer). Under torchrun, a rank that died on this host is named (its death failed
    this rank's collectives)."""
    if why is None:
        why = (
            "the process exited"
            if uncaught.exiting()
            else "the Trainer was dropped (garbage collected) while it trained"
        )
    step = opened.events.last.get("step", 0) if opened.events is not None else 0
    dead = [p for p in opened.peers or [] if p["rank"] != 0 and gone(p)]
    if tb is None:
        error = f"{why}: the Trainer did not reach on_train_end (step {step})"
    else:  # the exception that left train(), as wb.train records one
        error = f"{why} (in train(), at step {step})"
    if dead:
        error = f"{_named(dead)} died; {error}"
    with contextlib.suppress(OSError):  # the run directory may be gone (a temporary one)
        opened.finish(_State(step), "failed", error, dead[0]["rank"] if dead else None, tb)


def _orphaned(peers: list[dict], rank: int) -> None:
    """Another rank's end while training: when rank 0, the run's writer, died first on this
    host (the run says running and its lock is free), this rank writes the end, naming the
    ranks that died. Another host cannot tell (a lock on a shared disk may not hold there)."""
    writer, path = peers[0], peers[0].get("run")
    if path is None or not gone(writer):
        return  # rank 0 lives (the run's end is its own), or this host cannot tell
    with contextlib.suppress(OSError, RunBusy):  # rank 0 holds the lock after all
        run = runs.RunDir(path)
        lock = RunWriter(run).claim("record the failure")
        try:
            if run.summary.get("status") != "running" or run.summary.get("ended"):
                return
            dead = [writer] + [p for p in peers[1:] if p["rank"] != rank and gone(p)]
            step = run.step  # its events' last
            error = (
                f"{_named(dead)} died: the Trainer did not reach on_train_end (step {step}; "
                f"written by rank {rank})"
            )
            update = {"status": "failed", "error": error, "failed_rank": 0, "step": step}
            lock.finish(update, run.log)
        finally:
            lock.release()


def _named(ranks: list[dict]) -> str:
    """``rank 1 (pid 4470 on host-a)``, from ``_peers``' records, joined."""
    return ", ".join(f"rank {p['rank']} (pid {p['pid']} on {p['host']})" for p in ranks)


class _Steps:
    """Samples counted from the steps (``batch_size`` rows a batch, each rank); tokens are
    not: the batches are the user's collator's. A ``wb.bucket_collator``'s shapes are read
    from it (``shapes_seen``)."""

    tokens = 0

    def __init__(self, batch_size: int, collate=None):
        self.batch_size, self.samples = batch_size, 0
        shapes = getattr(collate, "shapes", None)
        self.shapes = shapes if isinstance(shapes, set) else None

    def consume(self, batches: int = 1) -> None:
        self.samples += self.batch_size * batches

    def evaluated(self) -> None:
        """Counted from the steps: an evaluation changes nothing."""

    def stats(self) -> dict[str, int | None]:
        seen = len(self.shapes) if self.shapes else None
        return {"padding_waste_pct": None, "shapes_seen": seen}


@dataclasses.dataclass
class _State:
    global_step: int
    max_steps: int | None = None


@dataclasses.dataclass
class _Ran:
    """What ``trainer.summary`` reads of a Trainer: its state and model."""

    state: Any
    model: Any


# transformers' own tables of model classes per task (models/auto/modeling_auto.py): the
# class names a task's Auto class builds, e.g. GPT2LMHeadModel for causal LM
TASK_TABLES = (
    ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "causal_lm"),
    ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "masked_lm"),
    ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "seq2seq"),
    ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "classification"),
)
SUFFIXES = (  # a class of the user's own (or PEFT's wrapper) named as transformers names them
    ("ForCausalLM", "causal_lm"),
    ("ForMaskedLM", "masked_lm"),
    ("ForSeq2SeqLM", "seq2seq"),
    ("ForConditionalGeneration", "seq2seq"),
    ("ForSequenceClassification", "classification"),
)


def _task(model) -> str:
    """The task as the events name it (perplexity for language models), from the model's
    class: transformers' task tables, else the class name's suffix; "other" otherwise."""
    from transformers.models.auto import modeling_auto

    name = type(model).__name__
    for table, task in TASK_TABLES:
        if name in set(getattr(modeling_auto, table, {}).values()):
            return task
    return next((task for suffix, task in SUFFIXES if name.endswith(suffix)), "other")


def _rows(dataset) -> int | None:
    try:
        return len(dataset)
    except TypeError:  # an iterable dataset has no length
        return None


def _arguments(args) -> dict[str, Any]:
    """The TrainingArguments as JSON-safe values (tokens and secrets left out)."""
    out = {}
    for k, v in args.to_dict().items():
        if "token" in k:
            continue
        out[k] = v if isinstance(v, (str, int, float, bool, type(None), list, dict)) else str(v)
    return out


def _collate_fn(loader):
    """The train loader's collate function, read (accelerate's adapter wraps a DataLoader)."""
    return getattr(getattr(loader, "base_dataloader", loader), "collate_fn", None)


def _device_of(args):
    """The workbench's record of the device the Trainer's arguments train on."""
    dev = args.device
    return pick_device(f"{dev.type}:{dev.index}" if dev.index is not None else dev.type)


def callback(
    *,
    name: str | None = None,
    run_dir: str | Path | None = None,
    live: str | bool = "auto",
    throughput_warmup_steps: int | None = None,
):
    """A ``TrainerCallback`` that gives any Trainer the run directory, dashboard and Stop.

    Parameters
    ----------
    name : str, optional
        The run directory's name after its timestamp (default: the model's class).
    run_dir : path, optional
        Where run directories go (default ``$WORKBENCH_RUNS``, else ``./runs``).
    live : {"auto", True, False} or callable
        As for ``wb.train``: the live dashboard, a static picture under papermill, a text line.
    throughput_warmup_steps : int, optional
        Steps left out of the throughput (default: as ``wb.train``).

    Examples
    --------
    >>> trainer = Trainer(model, args, train_dataset=train,
    ...                   callbacks=[wb.callback()])  # doctest: +SKIP
    """
    _check(live, name, throughput_warmup_steps, run_dir)
    return Attachment(
        name=name, run_dir=run_dir, live=live, throughput_warmup_steps=throughput_warmup_steps
    )


def attach(
    trainer,
    *,
    name: str | None = None,
    run_dir: str | Path | None = None,
    live: str | bool = "auto",
    throughput_warmup_steps: int | None = None,
):
    """Give ``trainer`` (a ``transformers.Trainer``) what a ``wb.train`` run has; returns the
    attachment (``.run`` is the ``wb.Run`` once training began). Call it before
    ``trainer.train()``; the arguments are ``callback``'s.
    """
    import transformers

    if not isinstance(trainer, transformers.Trainer):
        raise TypeError(
            f"wb.attach(trainer) takes a transformers.Trainer, got "
            f"{type(trainer).__name__}; for a callbacks list use wb.callback()"
        )
    if any(isinstance(c, Attachment) for c in trainer.callback_handler.callbacks):
        raise ValueError(
            "this Trainer is attached already (wb.attach or wb.callback): attach it once"
        )
    _check(live, name, throughput_warmup_steps, run_dir)
    attachment = Attachment(
        name=name,
        run_dir=run_dir,
        live=live,
        throughput_warmup_steps=throughput_warmup_steps,
        trainer=trainer,
    )
    trainer.add_callback(attachment)
    logprinters.quiet(trainer, attachment)
    return attachment
