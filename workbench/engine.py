"""``wb.train``: transformers' Trainer, composed (never subclassed) with device-aware defaults.

The Trainer is the engine. This module picks its arguments from the backend table, adds
callbacks (events, stop flag, NaN guard, HPU ``mark_step``), wraps the collator to count
real tokens, and keeps everything a run needs in its directory.
"""

from __future__ import annotations

import logging
import math
import signal
import statistics
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from . import run as runs
from .catalog import ModelSpec
from .catalog import model as as_model
from .data import DataSpec
from .data import dataset as as_dataset
from .device import DeviceInfo
from .device import device as pick_device

PRECISIONS = ("auto", "fp32", "bf16", "fp16")


# --------------------------------------------------------------------------- collator
class CountingCollator:
    """Wraps a collator; counts training samples, non-pad tokens, computed tokens and the
    distinct batch shapes, on the CPU.

    Counting here, on the batch the collator has just built, needs no device sync; the
    Trainer's own ``include_num_input_tokens_seen`` calls ``.item()`` every step. The
    dataloader collates a batch ahead of the step that uses it, so each batch's counts wait
    in a queue until ``consume`` credits them at the end of their step. Evaluation batches
    are collated while the model is in eval mode and are not counted.

    ``drop`` names batch keys that are left out of the batch once counted: packed blocks
    go to the model without ``attention_mask`` (see ``_build``).
    """

    def __init__(self, inner, model, drop: tuple[str, ...] = ()):
        from collections import deque

        self.inner, self.model, self.drop = inner, model, tuple(drop)
        self.pending: deque[tuple[int, int, int, tuple[int, ...] | None]] = deque()
        self.samples = 0
        self.tokens = 0  # non-pad tokens
        self.computed = 0  # every position the model computes, padding included
        self.shapes: set[tuple[int, ...]] = set()

    def __call__(self, features):
        batch = self.inner(features)
        if self.model.training:
            mask = batch.get("attention_mask") if hasattr(batch, "get") else None
            if mask is None:
                self.pending.append((len(features), 0, 0, None))
            else:
                self.pending.append((len(features), int(mask.sum()), mask.numel(), tuple(mask.shape)))
        for key in self.drop:
            batch.pop(key, None)
        return batch

    def consume(self, batches: int = 1) -> None:
        """Credit the counts of the next ``batches`` batches (those of the step just done)."""
        for _ in range(min(batches, len(self.pending))):
            samples, tokens, computed, shape = self.pending.popleft()
            self.samples += samples
            self.tokens += tokens
            self.computed += computed
            if shape is not None:
                self.shapes.add(shape)

    def stats(self) -> dict[str, float | int | None]:
        """Padding waste % and distinct shapes so far (None where there are no tokens)."""
        if not self.computed:
            return {"padding_waste_pct": None, "shapes_seen": None}
        return {"padding_waste_pct": 100 * (1 - self.tokens / self.computed), "shapes_seen": len(self.shapes)}


PADDINGS = ("auto", "longest", "max_length", "bucketed", "packed")


def default_padding(task: str, device_kind: str) -> str:
    """The batching a task gets on a backend when the user does not choose.

    Causal LM packs documents into full blocks everywhere (no padding at all, one shape).
    Classification is bucketed everywhere: at most k static shapes, little padding. On
    Gaudi every new shape compiles a graph, so what cannot be bucketed there (seq2seq) pads
    to max_length; elsewhere it pads each batch to its longest row.
    """
    if task == "causal_lm":
        return "packed"
    if task == "classification":
        return "bucketed"
    if task == "seq2seq":
        return "max_length" if device_kind == "hpu" else "longest"
    return "longest"  # images: every batch already has one shape


def _collator(task: str, tokenizer, model, padding: str = "longest", max_length: int = 128):
    import transformers

    # Sequences are truncated at max_length, so padding to a multiple of it pads every
    # batch to exactly max_length: one static shape.
    multiple = max_length if padding == "max_length" else None
    if task == "classification":
        return transformers.DataCollatorWithPadding(tokenizer, pad_to_multiple_of=multiple)
    if task == "causal_lm":
        return transformers.DataCollatorForLanguageModeling(tokenizer, mlm=False, pad_to_multiple_of=multiple)
    if task == "seq2seq":
        return transformers.DataCollatorForSeq2Seq(tokenizer, model=model, pad_to_multiple_of=multiple)
    return transformers.default_data_collator


# --------------------------------------------------------------------------- callbacks
def _callback_base():
    from transformers import TrainerCallback

    return TrainerCallback


class _Events:
    """Emits events at logging steps and evaluations; stops on request or on NaN."""

    def __init__(self, run: runs.Run, device: DeviceInfo, counter: CountingCollator,
                 batch_size: int, warmup_steps: int, world_size: int = 1, clip=None,
                 min_interval: float = 0.0):
        self.run, self.device, self.counter = run, device, counter
        # Reading the loss at a logging step waits for the device to finish every queued
        # step. With ``min_interval`` (seconds) a logging step that comes sooner after the
        # previous event is skipped, unless it ends the run or checkpoints; the Trainer
        # then averages the loss over the steps since its last log.
        self.min_interval = min_interval
        self._last_log: float | None = None
        self.clip = clip  # HPU fused clipping: the Trainer then logs no grad_norm itself
        self.world_size = world_size  # every rank sees its own shard: throughput x ranks
        self.batch_size, self.warmup_steps = batch_size, warmup_steps
        self.nan_step: int | None = None
        self.intervals: list[dict] = []
        self.last: dict[str, Any] = {}
        self.eval: dict[str, float] = {}
        self._mark = None  # (time, step, samples, tokens) at the start of the interval
        self._restart = True

    # the Trainer calls these -------------------------------------------------------
    def on_train_begin(self, args, state, control, **kw):
        self.max_steps = state.max_steps
        self.t_start = runs.monotonic()
        self.run.log.emit({"phase": "start", "step": state.global_step, "max_steps": state.max_steps,
                           "device": self.device.kind, "mem_total": self.device.total_memory,
                           "batch_size": self.batch_size, "world_size": self.world_size})
        self._restart = True

    def on_step_begin(self, args, state, control, **kw):
        if self._restart:  # start timing after a start, an evaluation or a save
            self._restart = False
            self._mark = (runs.monotonic(), state.global_step, self.counter.samples, self.counter.tokens)

    def on_step_end(self, args, state, control, **kw):
        self.counter.consume(args.gradient_accumulation_steps)
        last = state.global_step >= state.max_steps
        if self.run._stop.is_set():
            control.should_training_stop = True
            last = True
        if last:  # always log and checkpoint the final step (NaN is checked at the log first)
            control.should_log = True
            control.should_save = True
        elif (control.should_log and not control.should_save and self._last_log is not None
              and runs.monotonic() - self._last_log < self.min_interval):
            control.should_log = False
        return control

    def on_log(self, args, state, control, logs=None, **kw):
        logs = logs or {}
        if "loss" not in logs:
            return control
        self.device.synchronize()  # the only sync: at logging steps, before reading the clock
        now = runs.monotonic()
        t0, s0, n0, k0 = self._mark or (now, state.global_step, self.counter.samples, self.counter.tokens)
        dt = max(now - t0, 1e-9)
        steps = max(state.global_step - s0, 1)
        samples, tokens = self.counter.samples - n0, self.counter.tokens - k0
        mem = self.device.memory()
        event = {
            "step": state.global_step,
            "phase": "warmup" if state.global_step <= self.warmup_steps else "train",
            "loss": logs["loss"], "lr": logs.get("learning_rate"),
            "grad_norm": logs.get("grad_norm", self.clip.norm if self.clip is not None else None),
            "epoch": logs.get("epoch"), "samples_per_s": self.world_size * samples / dt,
            "tokens_per_s": self.world_size * tokens / dt if tokens else None, "step_time": dt / steps,
            "mem_alloc": mem["allocated"], "mem_peak": mem["peak"], "compiles": self.device.compiles(),
            "tokens_per_step": tokens / steps if tokens else None, **self.counter.stats(),
            "time": now - self.t_start,
        }
        self.run.log.emit(event)
        self._last_log = now
        self.last = event
        self.intervals.append(event)
        self._mark = (runs.monotonic(), state.global_step, self.counter.samples, self.counter.tokens)
        if not math.isfinite(logs["loss"]):
            self.nan_step = state.global_step
            control.should_training_stop = True
            control.should_save = False  # keep the last good checkpoint
        return control

    def on_evaluate(self, args, state, control, metrics=None, **kw):
        metrics = dict(metrics or {})
        if "eval_loss" in metrics and self.run.spec["model"]["task"] in ("causal_lm", "seq2seq"):
            metrics["eval_perplexity"] = math.exp(min(metrics["eval_loss"], 50))
        keep = {k: v for k, v in metrics.items()
                if k != "epoch" and not k.endswith(("_runtime", "_per_second", "_steps_per_second"))}
        self.eval = {k.removeprefix("eval_"): v for k, v in keep.items()}
        self.run.log.emit({"step": state.global_step, "phase": "eval", **keep})
        self._restart = True

    def on_save(self, args, state, control, **kw):
        self._restart = True

    def throughput(self) -> dict[str, float | None]:
        """Medians over the intervals after warm-up (all intervals if there are none)."""
        train = [e for e in self.intervals if e["phase"] == "train"] or self.intervals
        out = {}
        for key in ("samples_per_s", "tokens_per_s", "step_time"):
            vals = [e[key] for e in train if e.get(key) is not None]
            out[key] = statistics.median(vals) if vals else None
        return out


def world() -> tuple[int, int]:
    """(rank, world size) from torchrun's environment; (0, 1) in a single process."""
    import os

    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


STOP_FILE = "STOP"  # the launcher writes it into the run directory to stop every rank


class _DistStop:
    """Across ranks, stop at the same step: at each logging step every rank contributes
    its own stop request (run.stop(), an interrupt, or the launcher's STOP file) to one
    all-reduce, so all ranks agree. Stopping at different steps would hang the others."""

    def __init__(self, run: runs.Run, log_every: int):
        self.run, self.log_every = run, log_every

    def on_step_end(self, args, state, control, **kw):
        if state.global_step % self.log_every and state.global_step < state.max_steps:
            return control
        import torch
        import torch.distributed as dist

        local = self.run._stop.is_set() or (self.run.path / STOP_FILE).exists()
        flag = torch.tensor([1 if local else 0], device=args.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item():
            self.run._stop.set()
            control.should_training_stop = control.should_save = control.should_log = True
        return control


class _MarkStep:
    """HPU lazy mode: run the accumulated graph after backward and after the optimizer step."""

    def __init__(self, device: DeviceInfo):
        self.device = device

    def on_pre_optimizer_step(self, args, state, control, **kw):
        self.device.mark_step()

    def on_optimizer_step(self, args, state, control, **kw):
        self.device.mark_step()


def _as_callback(obj):
    """Give one of our plain classes the TrainerCallback interface (no-op defaults)."""
    base = _callback_base()
    cls = type(type(obj).__name__, (type(obj), base), {})
    obj.__class__ = cls
    return obj


# --------------------------------------------------------------------------- defaults
def _auto_steps(total: int) -> tuple[int, int]:
    """(log_every, save_every) for a run of ``total`` steps; save is a multiple of log."""
    log_every = max(1, min(25, total // 50))
    save = min(500, max(total // 4, 1))
    save_every = max(log_every, (save + log_every - 1) // log_every * log_every)
    return log_every, save_every


def _precision(device: DeviceInfo, precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    p = device.precision if precision == "auto" else precision
    if p == "fp16" and device.kind == "hpu" and device.generation == "Gaudi1":
        raise ValueError("Gaudi1 has no fp16: use precision='bf16'")
    return p


def _optimizer(device: DeviceInfo, model, lr: float, extra: dict):
    """(optim name for TrainingArguments, optimizer instance or None) from the backend table."""
    name = device.backend.optimizer
    if name == "hpex_fused_adamw":
        from habana_frameworks.torch.hpex.optimizers import FusedAdamW

        model.to(device.torch_device)  # the optimizer must see the parameters on the device
        opt = FusedAdamW(model.parameters(), lr=lr, eps=extra.get("adam_epsilon", 1e-8),
                         weight_decay=extra.get("weight_decay", 0.0))
        return "adamw_torch", opt
    return name, None


# --------------------------------------------------------------------------- building
# An alias of transformers' own SDPA attention under a name of ours. transformers builds
# no mask for an attention implementation that has no mask function registered (its way
# for backends that need none), so the model calls SDPA with is_causal=True and no mask,
# and SDPA can take its flash kernel. Under "sdpa" a mask tensor is built: always under
# torch.compile (torch before 2.14), and whenever position_ids come without a mask.
CAUSAL_SDPA = "workbench_causal_sdpa"


def _causal_sdpa(model):
    """Switch a model that uses SDPA to CAUSAL_SDPA, for batches that need no mask
    (packed blocks: right-padded, causal). Returns the function that switches it back,
    or None where the model uses another attention (eager, flash-attention: left as is)."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # LoRA
    before = getattr(base.config, "_attn_implementation", None)
    if before != "sdpa" or not hasattr(base, "set_attn_implementation"):
        return None
    AttentionInterface.register(CAUSAL_SDPA, sdpa_attention_forward)
    base.set_attn_implementation(CAUSAL_SDPA)
    return lambda: base.set_attn_implementation(before)


class _NoMaskAdvice(logging.Filter):
    """Drops transformers' advice to pass an attention mask (given when a pad id appears at
    a row's edge): packed blocks go without one on purpose, and the advice would suggest a
    problem in every packed run's output."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "passing in an `attention_mask`" not in record.getMessage()


def _quiet_missing_mask_warning() -> None:
    log = logging.getLogger("transformers.modeling_utils")
    if not any(isinstance(f, _NoMaskAdvice) for f in log.filters):
        log.addFilter(_NoMaskAdvice())


def _build(spec: dict, run: runs.Run, device: DeviceInfo):
    import transformers

    mspec, dspec, a = ModelSpec.from_dict(spec["model"]), DataSpec.from_dict(spec["data"]), spec["args"]
    transformers.set_seed(a["seed"])
    model, tok = mspec.build(num_labels=dspec.num_labels)
    if mspec.lora is not None:
        base = run.path / "base"
        if not mspec.is_pretrained:  # adapters alone cannot rebuild a random base: keep it
            if (base / "config.json").exists():
                import transformers as _t

                from .catalog import TASK_CLASSES

                model = getattr(_t, TASK_CLASSES[mspec.task]).from_pretrained(str(base), use_safetensors=True)
            else:
                model.save_pretrained(str(base))
        model = mspec.wrap_lora(model)
    if mspec.task == "diffusion":
        from .diffusion import DiffusionModel

        model = DiffusionModel(model)
    prepared = dspec.prepare(tok, max_length=a["max_length"])
    rank, size = world()
    padding, sampler, drop, restore = a.get("padding", "longest"), None, (), None
    if padding == "packed":  # causal LM: documents in full blocks, one static shape
        from .shapes import BucketCollator, pack

        prepared = pack(prepared, a["max_length"], tok.eos_token_id)
        inner = BucketCollator(tok, [a["max_length"]], a["batch_size"], task=mspec.task)
        # Rows are right-padded and attention is causal, so the mask (ones, but for dummy
        # rows whose labels are -100) changes no loss: the blocks go without it, and SDPA
        # is told to be causal instead of being handed a mask tensor (_causal_sdpa).
        drop = ("attention_mask",)
        restore = _causal_sdpa(model)
        _quiet_missing_mask_warning()
    elif padding == "bucketed":  # at most k static shapes (on Gaudi: at most k graph compiles)
        from .shapes import BucketBatchSampler, BucketCollator, buckets, lengths_of

        lengths = lengths_of(prepared["train"])
        bounds = buckets(lengths, k=a.get("buckets", 8), max_length=a["max_length"], batch_size=a["batch_size"])
        if bounds[-1] < a["max_length"]:  # eval rows may be longer than every training row
            bounds.append(a["max_length"])
        inner = BucketCollator(tok, bounds, a["batch_size"], task=mspec.task)
        sampler = BucketBatchSampler(lengths, bounds, a["batch_size"], seed=a["seed"], num_replicas=size, rank=rank)
    else:
        inner = _collator(mspec.task, tok, model, padding, a["max_length"])
    counter = CountingCollator(inner, model, drop=drop)
    extra = dict(a["trainer_overrides"])
    optim, optimizer = _optimizer(device, model, a["lr"], extra)
    targs = training_arguments(a, device, mspec.task, run.path, optim)
    clip = None
    if device.backend.optimizer == "hpex_fused_adamw" and targs["max_grad_norm"] > 0:
        # Gaudi's fused clip-norm replaces the Trainer's clipping (one kernel, not one per tensor)
        clip = _as_callback(_FusedClip(model, targs["max_grad_norm"]))
        targs["max_grad_norm"] = 0.0
    args = transformers.TrainingArguments(**targs)
    events = _as_callback(_Events(run, device, counter, a["batch_size"], a["throughput_warmup_steps"], size, clip,
                                  min_interval=_log_interval(a, device, size)))
    callbacks = [events] + ([clip] if clip is not None else [])
    if size > 1:
        callbacks.insert(0, _as_callback(_DistStop(run, a["log_every"])))
    if device.kind == "hpu" and device.mode == "lazy":
        callbacks.append(_as_callback(_MarkStep(device)))
    callbacks += run.callbacks
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=prepared["train"], eval_dataset=prepared["eval"],
        data_collator=counter, processing_class=tok if mspec.task != "diffusion" else None, callbacks=callbacks,
        optimizers=(optimizer, None), compute_metrics=_accuracy if mspec.task == "classification" else None,
    )
    trainer.remove_callback(transformers.PrinterCallback)  # events replace its printed dicts
    if sampler is not None:
        _use_batch_sampler(trainer, sampler)
    return trainer, events, model, tok, restore


def _log_interval(a: dict, device: DeviceInfo, world_size: int) -> float:
    """Seconds at least between events (0: log at every logging step). The spec's
    ``log_interval_s`` is None for the default cadence: the backend table's interval, in
    one process only (ranks must log at the same steps: the loss is gathered across them)."""
    interval = a.get("log_interval_s", 0.0)  # runs made before the throttle: every step
    if interval is None:
        interval = device.backend.log_interval_s
    return float(interval) if world_size == 1 else 0.0


def _use_batch_sampler(trainer, sampler) -> None:
    """Train on ``sampler``'s batches. The Trainer has no public hook for a batch sampler,
    so this one Trainer instance gets its own ``get_train_dataloader`` (the class and the
    library stay untouched); the loader still goes through accelerate's ``prepare``."""
    import torch

    def get_train_dataloader():
        args = trainer.args
        loader = trainer.accelerator.prepare(torch.utils.data.DataLoader(
            trainer.train_dataset, batch_sampler=sampler, collate_fn=trainer.data_collator,
            num_workers=args.dataloader_num_workers, pin_memory=args.dataloader_pin_memory))
        shard = getattr(loader, "batch_sampler", None)
        if getattr(shard, "batch_sampler", None) is sampler:
            # several processes: the sampler already shards by rank; accelerate's
            # BatchSamplerShard must not shard it again
            shard.num_processes, shard.process_index, shard.batch_size = 1, 0, None
        return loader

    trainer.get_train_dataloader = get_train_dataloader


def training_arguments(a: dict, device: DeviceInfo, task: str, run_path: Path, optim: str) -> dict[str, Any]:
    """The TrainingArguments fields for a run's arguments on ``device`` (from the backend table)."""
    precision = _precision(device, a["precision"])
    mode = a.get("mode")
    compile_ = a["compile"]
    if mode is not None:
        compile_ = mode == "compile"
    elif compile_ is None:  # HPU eager mode wants torch.compile; elsewhere it is opt-in
        compile_ = device.kind == "hpu" and device.mode == "eager"
    targs = dict(
        output_dir=str(run_path / "checkpoints"),
        per_device_train_batch_size=a["batch_size"], per_device_eval_batch_size=a["batch_size"],
        learning_rate=a["lr"], max_steps=a["max_steps"] or -1, num_train_epochs=a["epochs"] or 1,
        logging_steps=a["log_every"], logging_nan_inf_filter=False,
        eval_strategy="steps" if a["eval_every"] else "no", eval_steps=a["eval_every"],
        save_strategy="steps", save_steps=a["save_every"], save_total_limit=2,
        bf16=precision == "bf16", fp16=precision == "fp16", use_cpu=device.kind == "cpu",
        optim=optim, seed=a["seed"], data_seed=a["seed"], report_to=a["report_to"] or "none",
        disable_tqdm=True, remove_unused_columns=False, dataloader_num_workers=0,
        prediction_loss_only=task != "classification", max_grad_norm=1.0,
        torch_compile=bool(compile_), label_names=["labels"] if task != "diffusion" else [],
    )
    if compile_ and device.backend.compile_backend:
        targs["torch_compile_backend"] = device.backend.compile_backend
    if world()[1] > 1:
        targs["ddp_backend"] = device.dist_backend
    targs.update(a["trainer_overrides"])
    return targs


class _FusedClip:
    """HPU: clip gradients with hpex FusedClipNorm before each optimizer step; keeps the
    norm (a device tensor, read only at logging steps) for the grad_norm event."""

    def __init__(self, model, max_norm: float):
        from habana_frameworks.torch.hpex.normalization import FusedClipNorm

        self.params = [p for p in model.parameters() if p.requires_grad]
        self.clip = FusedClipNorm(self.params, max_norm)
        self.norm = None

    def on_pre_optimizer_step(self, args, state, control, **kw):
        self.norm = self.clip.clip_norm(self.params)


def _accuracy(pred) -> dict[str, float]:
    import numpy as np

    logits = pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions
    labels = np.asarray(pred.label_ids)
    keep = labels != -100  # dummy rows that fill static-shape batches do not count
    return {"accuracy": float((np.asarray(logits).argmax(-1)[keep] == labels[keep]).mean())}


# --------------------------------------------------------------------------- running
class _Interrupts:
    """While training in the main thread, the first SIGINT (Ctrl-C, the notebook's stop
    button, Jupyter's interrupt endpoint) stops gracefully after the current step with a
    checkpoint; a second one raises KeyboardInterrupt as usual."""

    def __init__(self, run: runs.Run):
        self.run, self.previous = run, None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.run._stop.is_set():
            raise KeyboardInterrupt
        self.run.stop()
        print(f"\nStopping {self.run.name} after this step (interrupt again to abort).", file=sys.stderr, flush=True)

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        return False


def _execute(run: runs.Run, resume_from: Path | None = None) -> runs.Run:
    spec = run.spec
    device = pick_device(spec["args"]["device"])
    from .device import _version

    rank, size = world()
    main = rank == 0
    if size > 1 and device.kind != "cpu":
        device = pick_device(f"{device.kind}:{int(__import__('os').environ.get('LOCAL_RANK', '0'))}")
    if not main:  # only rank 0 writes the run's events and summary
        run.log = runs.NullLog()
    else:
        runs.started(run, {"device": device.to_dict(), "max_steps": spec["args"]["max_steps"], "world_size": size,
                           "versions": {**device.versions, "datasets": _version("datasets"),
                                        "accelerate": _version("accelerate"),
                                        "workbench": _version("gaudi-workbench")}})
    run._stop.clear()
    run.error = None
    t0 = runs.monotonic()
    status, error, tb = "completed", None, None
    events = restore = None
    quiet = _Quiet()
    try:
        quiet.__enter__()
        trainer, events, model, tok, restore = _build(spec, run, device)
        run.trainer, run._model, run._tokenizer = trainer, model, tok
        with _Interrupts(run):
            try:
                trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
            except KeyboardInterrupt:
                status, error = "stopped", "interrupted twice: aborted without a final checkpoint"
            if events.nan_step is not None:
                status = "failed"
                error = (f"the loss became {events.last.get('loss')} at step {events.nan_step}; training stopped and "
                         f"the last good checkpoint was kept. Likely fixes: a lower learning rate "
                         f"(lr={spec['args']['lr'] / 10:g}), precision='bf16' instead of 'fp16', or gradient "
                         f"clipping (max_grad_norm=1.0).")
                print(error, file=sys.stderr, flush=True)
            elif status == "completed" and run._stop.is_set():
                status = "stopped"
            if status != "failed" and error is None:
                trainer.evaluate()
    except BaseException as e:  # recorded, then re-raised
        status, error, tb = "failed", f"{type(e).__name__}: {e}", traceback.format_exc()
        if device.backend.oom_marker in str(e):  # the backend table knows each device's OOM text
            error += (f" -- out of {device.kind} memory: wb.plan_memory(...) names the cheapest fix "
                      f"(a smaller batch_size, gradient_checkpointing=True, precision='bf16')")
        run.error = e
        if isinstance(e, KeyboardInterrupt):
            status = "stopped"
        raise
    finally:
        if restore is not None:  # the model leaves as it came (generation pads prompts: masks needed)
            restore()
        state = run.trainer.state if run.trainer is not None else None
        mem = device.memory()
        summary = {"status": status, "error": error, "traceback": tb,
                   "step": state.global_step if state else 0,
                   "max_steps": state.max_steps if state else spec["args"]["max_steps"],
                   "wall_time_s": runs.monotonic() - t0, "mem_peak": mem["peak"], "mem_total": mem["total"],
                   "checkpoint": str(run.last_checkpoint) if run.last_checkpoint else None}
        if events is not None:
            summary.update({"train_loss": events.last.get("loss"), "eval": events.eval, **events.throughput(),
                            "compiles": events.last.get("compiles")})
        if main:
            runs.finished(run, summary)
            run.log.emit({"phase": "end", "step": summary["step"], "status": status})
        elif run in runs._ACTIVE:
            runs._ACTIVE.remove(run)
        quiet.__exit__()
    return run


class _Quiet:
    """Silence the libraries' own progress bars while a run trains (our display has one)."""

    def __enter__(self):
        import datasets
        from transformers.utils import logging as hf_logging

        self.hf, self.ds = hf_logging.is_progress_bar_enabled(), datasets.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        datasets.disable_progress_bars()
        return self

    def __exit__(self, *exc):
        import datasets
        from transformers.utils import logging as hf_logging

        if getattr(self, "hf", False):
            hf_logging.enable_progress_bar()
        if getattr(self, "ds", False):
            datasets.enable_progress_bars()


def _start(run: runs.Run, resume_from: Path | None, background: bool) -> runs.Run:
    if not background:
        return _execute(run, resume_from)

    def target():
        try:
            _execute(run, resume_from)
        except BaseException:  # kept on run.error; run.wait() re-raises
            pass

    run._thread = threading.Thread(target=target, name=f"workbench-{run.name}", daemon=True)
    run._thread.start()
    return run


def train(model: str | ModelSpec, data: str | DataSpec, *, max_steps: int | None = None,
          epochs: float | None = None, batch_size: int = 16, lr: float | None = None,
          precision: str = "auto", device: str = "auto", eval_every: int | None = None,
          save_every: int | None = None, log_every: int | None = None, run_dir: str | Path | None = None,
          name: str | None = None, live: str | bool = "auto", background: bool = False,
          max_length: int = 128, padding: str = "auto", buckets: int = 8, seed: int = 0,
          compile: bool | None = None, mode: str | None = None, throughput_warmup_steps: int | None = None,
          report_to: str | list[str] | None = None, callbacks: list | None = None,
          **trainer_overrides) -> runs.Run:
    """Train ``model`` on ``data`` with transformers' Trainer; returns the Run.

    Parameters
    ----------
    model : str or ModelSpec
        ``wb.model(...)`` or a catalog name such as ``"bert-tiny"``.
    data : str or DataSpec
        ``wb.dataset(...)`` or a bundled name such as ``"docstrings-topic"``.
    max_steps, epochs
        Length of training (default: one epoch).
    batch_size : int
        Per-device batch size.
    lr : float, optional
        Default 1e-3 for random-init models, 5e-5 for pretrained weights.
    precision : {"auto", "fp32", "bf16", "fp16"}
        ``auto`` takes the device's preference (bf16 on Gaudi and recent GPUs, fp32 on CPU).
    device : str
        ``auto``, ``hpu``, ``cuda``, ``cpu``.
    eval_every, save_every, log_every : int, optional
        Steps between evaluations (default: only at the end), checkpoints and events.
        Without ``log_every``, about 50 events per run (at most 25 steps apart) and, on
        one GPU or HPU, none sooner than 0.5 s after the last (reading the loss makes
        the host wait for the device), but for checkpoints and the last step.
    run_dir : path, optional
        Where the run directory is created (default ``./runs``).
    live : {"auto", True, False} or callable
        Live progress display; ``auto`` shows the live dashboard where a front end can
        draw it, a static picture in papermill, a text line in a terminal. A callable
        ``live(run)`` attaches a display of your own (``run.subscribe(fn)``).
    background : bool
        Return at once and train in a thread (``run.stop()``, ``run.wait()``).
    max_length : int
        Sequences are truncated to this many tokens.
    padding : {"auto", "longest", "max_length", "bucketed", "packed"}
        How batches are shaped. ``bucketed``: sequences grouped into at most ``buckets``
        length buckets chosen to minimise padding, every batch padded to its bucket and to
        full size (few static shapes: on Gaudi, few graph compiles). ``packed`` (causal LM):
        documents concatenated into full ``max_length`` blocks, one shape, no padding;
        the blocks reach the model without an attention mask and SDPA is told the
        attention is causal, so it can take its flash kernel. ``longest``: each batch
        padded to its longest row (dynamic shapes). ``max_length``: one static shape,
        much padding. ``auto``: packed for causal LM, bucketed for classification, else
        longest (max_length on Gaudi).
    buckets : int
        Most distinct sequence lengths with ``padding="bucketed"``.
    compile : bool, optional
        ``torch.compile`` the model (default: on in HPU eager mode only).
    mode : {"eager", "lazy", "compile"}, optional
        Execution mode. ``lazy`` is Gaudi's legacy graph mode (``mark_step``); it is fixed
        per process, so it must be chosen before anything touches the HPU (else a clear
        error says to restart the kernel). ``compile`` is eager plus ``torch.compile``.
    report_to : str or list, optional
        ``"tensorboard"`` or ``"mlflow"``; nothing by default.
    callbacks : list of transformers.TrainerCallback, optional
        Extra callbacks for the Trainer (not saved in the run; pass them again to resume).
    **trainer_overrides
        Any ``transformers.TrainingArguments`` field (e.g. ``max_grad_norm=1.0``).

    Examples
    --------
    >>> import workbench as wb
    >>> run = wb.train("bert-tiny", "docstrings-topic", max_steps=20, live=False)  # doctest: +SKIP
    >>> run.status  # doctest: +SKIP
    'completed'
    """
    options = dict(locals())
    for key in ("model", "data", "live", "background", "callbacks", "trainer_overrides"):
        options.pop(key)
    run = prepare(model, data, **options, **trainer_overrides)
    run.callbacks = list(callbacks or [])
    _attach_display(run, live, background)
    return _start(run, None, background)


def prepare(model: str | ModelSpec, data: str | DataSpec, *, max_steps: int | None = None,
            epochs: float | None = None, batch_size: int = 16, lr: float | None = None,
            precision: str = "auto", device: str = "auto", eval_every: int | None = None,
            save_every: int | None = None, log_every: int | None = None,
            run_dir: str | Path | None = None, name: str | None = None, max_length: int = 128,
            padding: str = "auto", buckets: int = 8, seed: int = 0, compile: bool | None = None,
            mode: str | None = None, throughput_warmup_steps: int | None = None,
            report_to: str | list[str] | None = None, extra_spec: dict | None = None,
            **trainer_overrides) -> runs.Run:
    """Check the arguments, create the run directory and its spec.json; train nothing.

    ``wb.train`` runs the result in this process; ``wb.launch`` in torchrun workers.
    """


    mspec, dspec = as_model(model), as_dataset(data)
    if mspec.task != dspec.task:
        raise ValueError(f"{mspec.name} does its task {mspec.task!r} but {dspec.name!r} is a "
                         f"{dspec.task!r} dataset; pick a matching pair, e.g. "
                         f"wb.model('{mspec.family}', task='{dspec.task}') if the family supports it")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if padding not in PADDINGS:
        raise ValueError(f"unknown padding {padding!r}; known: {', '.join(PADDINGS)}")
    import os

    before = os.environ.get("PT_HPU_LAZY_MODE")
    if mode is not None:
        from .device import set_hpu_mode

        set_hpu_mode(mode)  # before the device probe below loads the bridge
    dev = pick_device(device)  # fails early, with the fix, on an unavailable device
    if mode == "lazy" and dev.kind != "hpu":
        if before is None:
            os.environ.pop("PT_HPU_LAZY_MODE", None)
        else:
            os.environ["PT_HPU_LAZY_MODE"] = before
        raise ValueError(f"mode='lazy' is Gaudi's graph mode; this run is on {dev.kind}: use mode='eager' or 'compile'")
    if padding == "auto":
        padding = default_padding(mspec.task, dev.kind)
    if padding == "packed" and mspec.task != "causal_lm":
        raise ValueError(f"padding='packed' is for causal language models; {mspec.name} does {mspec.task}: "
                         f"use 'bucketed' or 'longest'")
    if padding == "bucketed" and mspec.task not in ("classification", "causal_lm"):
        raise ValueError(f"padding='bucketed' handles classification and causal LM; {mspec.task} "
                         f"uses 'longest' or 'max_length'")
    if buckets < 1:
        raise ValueError(f"buckets must be at least 1, got {buckets}")
    if lr is None:
        lr = 5e-5 if mspec.is_pretrained else 1e-3
    if max_steps:
        total = max_steps
    else:
        rows = dspec.load()["train"].num_rows
        total = max(1, math.ceil(rows / batch_size) * math.ceil(epochs or 1))
    auto_log, auto_save = _auto_steps(total)
    log_interval_s = 0.0 if log_every else None  # the device's default; an explicit cadence is kept exactly
    log_every = log_every or auto_log
    save_every = save_every or auto_save
    if save_every % log_every:  # checkpoints land on logging steps, where NaN is checked
        save_every = (save_every // log_every + 1) * log_every
    args = {"max_steps": max_steps, "epochs": epochs, "batch_size": batch_size, "lr": lr,
            "precision": precision, "device": dev.kind if device == "auto" else device,
            "eval_every": eval_every, "save_every": save_every, "log_every": log_every,
            "log_interval_s": log_interval_s, "max_length": max_length, "padding": padding,
            "buckets": buckets, "seed": seed, "compile": compile, "mode": mode,
            "throughput_warmup_steps": throughput_warmup_steps if throughput_warmup_steps is not None else max(3, log_every),
            "report_to": report_to, "trainer_overrides": trainer_overrides}
    path = runs.new_run_dir(name or f"{mspec.name}-{dspec.name}", run_dir)
    spec = {"model": mspec.to_dict(), "data": dspec.to_dict(), "args": args, **(extra_spec or {})}
    runs.write_json(path / "spec.json", spec)
    return runs.Run(path)


def _resume(run: runs.Run, max_steps: int | None = None, live: str | bool = "auto",
            background: bool = False, callbacks: list | None = None, **overrides) -> runs.Run:
    if run.is_training:
        raise RuntimeError(f"{run.name} is training right now; stop it first")
    ckpt = run.last_checkpoint
    if ckpt is None:
        raise FileNotFoundError(f"{run.name} has no checkpoint to resume from; start a new run with wb.train(...)")
    spec = run.spec
    if max_steps is not None:
        spec["args"]["max_steps"] = max_steps
    spec["args"]["trainer_overrides"].update(overrides)
    spec.setdefault("resumes", []).append({"from": ckpt.name, "max_steps": max_steps, "at": runs._now()})
    runs.write_json(run.path / "spec.json", spec)
    run.log.truncate_after(int(ckpt.name.split("-")[-1]))
    run.callbacks = list(callbacks or [])
    _attach_display(run, live, background)
    return _start(run, ckpt, background)


def _attach_display(run: runs.Run, live: str | bool, background: bool) -> None:
    from .dashboard import attach

    run.log.subscribers.clear()  # a resumed run gets one fresh display, not two
    if callable(live):  # a display of the caller's own: live(run) subscribes it
        live(run)
        return
    attach(run, live, background)


def load_model(run: runs.Run):
    """(model, tokenizer) from the run's last checkpoint, weights from safetensors."""
    ckpt = run.last_checkpoint
    if ckpt is None:
        raise FileNotFoundError(f"{run.name} has no checkpoint yet")
    spec = ModelSpec.from_dict(run.spec["model"])
    if spec.task == "diffusion":
        from safetensors.torch import load_file

        from .diffusion import DiffusionModel

        unet, _ = spec.build()
        model = DiffusionModel(unet)
        model.load_state_dict(load_file(str(ckpt / "model.safetensors")))
        return model, None
    import transformers

    from .catalog import TASK_CLASSES

    cls = getattr(transformers, TASK_CLASSES[spec.task])
    tok = transformers.AutoTokenizer.from_pretrained(str(ckpt))
    if spec.lora is not None:  # base weights (kept in the run, or the pretrained source) + adapters
        import peft

        base_dir = run.path / "base"
        if (base_dir / "config.json").exists():
            base = cls.from_pretrained(str(base_dir), use_safetensors=True)
        else:
            base, _ = spec.build()
        return peft.PeftModel.from_pretrained(base, str(ckpt)), tok
    model = cls.from_pretrained(str(ckpt), use_safetensors=True, trust_remote_code=spec.trust_remote_code)
    return model, tok
