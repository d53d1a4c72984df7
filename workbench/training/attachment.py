"""A user's own ``transformers.Trainer``, attached: the run directory, the live view and Stop.

``wb.attach(trainer)`` before ``trainer.train()``, or ``Trainer(..., callbacks=[wb.callback()])``,
adds one ``TrainerCallback``: an ``Attachment``. The Trainer, its model, its data and its
arguments stay the user's; nothing is subclassed or patched. When training begins the
attachment writes a run directory under ``runs/`` (through ``rundir.writer``, the one
writer), shows the dashboard ``wb.train`` shows (``views.dashboard.attach``), and hands every
step to the engine's own ``callbacks.Events``: one event stream, whoever built the Trainer.
The checkpoints stay in the Trainer's ``output_dir``; the run's ``checkpoints`` links there.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import threading
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ..backends.registry import device as pick_device
from ..rundir import run as runs
from ..rundir.run import STOP_FILE
from ..rundir.writer import RunWriter, create
from ..views.dashboard import attach as show
from .batching import CountingCollator
from .callbacks import Events, MarkStep
from .engine import Run, training
from .interrupts import Interrupts
from .recipe import auto_steps, optim_name, throughput_warmup
from .trainer import fused_optimizer, summary

# why an attached run cannot be rebuilt by Run.resume()
NOT_REBUILDABLE = (
    "it was trained by your own Trainer, and its spec describes that Trainer but "
    "cannot rebuild it (model code, data, collator and metrics are yours)"
)
LIVE = ("auto", True, False)


def _check(live, name, throughput_warmup_steps, run_dir) -> None:
    """Refuse bad arguments before anything is written, each naming the fix."""
    if not callable(live) and live not in LIVE:
        raise ValueError(f"live={live!r}: pass 'auto', True, False or a callable live(run)")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ValueError(
            f"name={name!r}: pass a short text for the run directory's name, e.g. name='bert-sst2'"
        )
    steps = throughput_warmup_steps
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 0):
        raise ValueError(
            f"throughput_warmup_steps={steps!r}: pass a whole number of steps, 0 or more"
        )
    runs.check_root(run_dir)


class Attachment(TrainerCallback):
    """The TrainerCallback that makes a run of a user's Trainer (built by ``callback()``).

    One training call (``trainer.train()``) is one run; training again (resuming from a
    checkpoint, say) makes the next run. ``run`` is the live ``wb.Run`` while it trains,
    and the last one after.
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
        self.trainer = trainer  # known with wb.attach(trainer): its dataset sizes, its processor
        self.run: Run | None = None
        self.events: Events | None = None
        self._writer: RunWriter | None = None
        self._stack: contextlib.ExitStack | None = None
        self._device = None
        self._t0 = 0.0
        self._cadence = 1
        self._output_dir: Path | None = None
        self._marks: MarkStep | bool | None = (
            None  # lazy mode's mark_step, once the device is known
        )
        atexit.register(self._at_exit)

    # ------------------------------------------------------------------ the run
    def _spec(self, args, state, model, loader) -> dict[str, Any]:
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
        return {
            "attached": {
                "rebuildable": False,
                "why": NOT_REBUILDABLE,
                "resume": f"trainer.train(resume_from_checkpoint=True) with the Trainer "
                f"that made it (its checkpoints are in {args.output_dir})",
            },
            "model": {
                "name": type(model).__name__,
                "class": f"{type(model).__module__}.{type(model).__qualname__}",
                "config": config.to_dict() if config is not None else None,
                "num_params": params,
                "task": _task(model),
            },
            "data": {
                "source": f"{type(loader.dataset).__name__ if loader is not None else 'own'}"
                f" ({train_rows} rows)",
                "train_rows": train_rows,
                "eval_rows": eval_rows,
            },
            "args": {
                "max_steps": state.max_steps,
                "batch_size": batch,
                "lr": args.learning_rate,
                "seed": args.seed,
                "precision": "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32",
                "device": self._device.kind,
                "log_every": self._cadence,
                "throughput_warmup_steps": self.warmup,
            },
            "training_arguments": _arguments(args),
        }

    def _begin(self, args, state, model, loader) -> None:
        self._abandon("it was still open when the Trainer trained again (an error, likely)")
        self._device = _device_of(args)
        size = args.world_size
        self._cadence = auto_steps(state.max_steps)[0]
        self.warmup = throughput_warmup(self.warmup, self._cadence)  # as wb.train
        spec = self._spec(args, state, model, loader)
        path = runs.new_run_dir(self.name or f"{spec['model']['name']}-own", self.run_dir)
        self._output_dir = Path(args.output_dir).absolute()
        create(path, spec, checkpoints=self._output_dir)
        run = Run(path)
        self.run = run
        run.dashboard = show(
            run, self.live, background=threading.current_thread() is not threading.main_thread()
        )
        self._writer = RunWriter(run).claim()
        self._writer.begin_on(self._device, size)
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(training(run))  # %wb stop and Run.stop() find it
        self._stack.enter_context(Interrupts(run))  # the first Ctrl-C stops with a checkpoint
        counter = _counter(loader, model)
        self.events = Events(
            run.log,
            run.stop_flag,
            spec["model"]["task"],
            self._device,
            counter,
            args.per_device_train_batch_size,
            self.warmup,
            size,
            min_interval=self._device.backend.log_interval_s if size == 1 else 0.0,
            stop_file=path / STOP_FILE if size == 1 else None,
            save_last=False,
        )
        self._t0 = runs.monotonic()

    def _end(self, state, model, status: str | None = None, error: str | None = None) -> None:
        run, writer, events = self.run, self._writer, self.events
        if writer is None:
            return
        self._writer = None
        stopped = run.stop_flag.is_set()
        if status is None:
            status = "stopped" if stopped else "completed"
            if events.nan_step is not None:
                status = "failed"
                error = (
                    f"the loss became {events.last.get('loss')} at step {events.nan_step}; "
                    f"training stopped"
                )
        ran = _Ran(state, model)
        end = summary(
            run, ran, self._device, events, status, error, None, runs.monotonic() - self._t0
        )
        end["output_dir"] = str(self._output_dir)
        stack, self._stack = self._stack, None
        writer.finish(end, run.log, ended=stack.close if stack is not None else None)

    def _at_exit(self) -> None:
        with contextlib.suppress(OSError):  # the run directory may be gone (a temporary one)
            self._abandon("the process exited while the Trainer trained")

    def _abandon(self, why: str) -> None:
        """End a run the Trainer never ended (an exception left ``train()``) as failed."""
        if self._writer is not None:
            step = self.events.last.get("step", 0) if self.events is not None else 0
            self._end(
                _State(step),
                None,
                "failed",
                f"{why}: the Trainer did not reach on_train_end (step {step})",
            )

    # ------------------------------------------------------------------ the Trainer calls these
    def _mark(self, args, state, control, **kw):
        """HPU lazy mode: the engine's ``MarkStep`` points (every rank)."""
        if self._marks is None:
            self._marks = MarkStep(_device_of(args)) if _device_of(args).mode == "lazy" else False
        if self._marks:
            self._marks._mark(args, state, control)
        return control

    on_substep_end = on_pre_optimizer_step = on_optimizer_step = on_prediction_step = _mark

    def on_train_begin(self, args, state, control, model=None, train_dataloader=None, **kw):
        if not state.is_world_process_zero:
            return control  # rank 0 writes the run; other ranks train as they would
        self._begin(args, state, model, train_dataloader)
        return self.events.on_train_begin(args, state, control, **kw)

    def on_step_begin(self, args, state, control, **kw):
        if self._writer is not None:
            self.events.on_step_begin(args, state, control, **kw)
        return control

    def on_step_end(self, args, state, control, **kw):
        if self._writer is None:
            return control
        if state.global_step % self._cadence == 0:
            control.should_log = True  # the view's cadence: about 50 events a run
        return self.events.on_step_end(args, state, control, **kw)

    def on_log(self, args, state, control, logs=None, **kw):
        if self._writer is not None:
            self.events.on_log(args, state, control, logs=logs, **kw)
        return control

    def on_evaluate(self, args, state, control, metrics=None, **kw):
        if self._writer is not None:
            self.events.on_evaluate(args, state, control, metrics=metrics, **kw)
        return control

    def on_save(self, args, state, control, **kw):
        if self._writer is not None:
            self.events.on_save(args, state, control, **kw)
        return control

    def on_train_end(self, args, state, control, model=None, **kw):
        self._end(state, model)
        return control


@dataclasses.dataclass
class _State:
    global_step: int
    max_steps: int | None = None


@dataclasses.dataclass
class _Ran:
    """What ``trainer.summary`` reads of a Trainer: its state and model."""

    state: Any
    model: Any


TASKS = (
    ("ForCausalLM", "causal_lm"),
    ("ForSeq2SeqLM", "seq2seq"),
    ("ForConditionalGeneration", "seq2seq"),
    ("ForSequenceClassification", "classification"),
)


def _task(model) -> str:
    """The task as the events name it (perplexity for language models), from the class name."""
    name = type(model).__name__
    return next((task for suffix, task in TASKS if name.endswith(suffix)), "other")


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


def _counter(loader, model) -> CountingCollator:
    """Count samples and tokens where the batches are made, without a device sync: the
    train loader's collate function, wrapped. Workers collate in other processes, where
    nothing is counted here: throughput then comes from the steps and the batch size."""
    base = getattr(loader, "base_dataloader", loader)  # accelerate's adapter wraps a DataLoader
    inner = getattr(base, "collate_fn", None)
    counter = CountingCollator(inner if inner is not None else _identity, model)
    if base is not None and not getattr(base, "num_workers", 0):
        # the DataLoader reads collate_fn when each epoch's iterator is made: after this
        base.collate_fn = counter
    return counter


def _device_of(args):
    """The workbench's record of the device the Trainer's arguments train on."""
    dev = args.device
    return pick_device(f"{dev.type}:{dev.index}" if dev.index is not None else dev.type)


def _identity(features):
    return features


def _apply(trainer) -> None:
    """The backend's fused AdamW for a Trainer that chose no optimizer of its own, built by
    the Trainer from its own decay groups (``optimizer_cls_and_kwargs``, a constructor
    argument the Trainer keeps as an attribute)."""
    if trainer.optimizer is not None or trainer.optimizer_cls_and_kwargs is not None:
        return
    device = _device_of(trainer.args)
    if trainer.args.optim in ("adamw_torch", optim_name(device)):  # AdamW, not one of the user's
        trainer.optimizer_cls_and_kwargs = fused_optimizer(device, trainer.args)


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
    attachment (``.run`` is the ``wb.Run`` once training began).

    Call it before ``trainer.train()``. On Gaudi, a Trainer that chose no optimizer gets the
    fused AdamW over its own weight-decay groups. The arguments are ``callback``'s.
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
    _apply(trainer)
    trainer.add_callback(attachment)
    return attachment
