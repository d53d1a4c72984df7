"""Recipes: the arguments of a run, checked and completed, and the TrainingArguments they make.

Pure functions of a run's arguments and the device's backend record: nothing here builds a
model, touches a device or writes a file, so every choice can be tested on its own.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from .device import backend

PADDINGS = ("auto", "longest", "max_length", "bucketed", "packed")
PACKINGS = ("concat", "isolated")


def world() -> tuple[int, int]:
    """(rank, world size) from torchrun's environment; (0, 1) in a single process."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


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
        return "max_length" if backend(device_kind).static_shapes else "longest"
    return "longest"  # images: every batch already has one shape


def auto_steps(total: int) -> tuple[int, int]:
    """(log_every, save_every) for a run of ``total`` steps; save is a multiple of log."""
    log_every = max(1, min(25, total // 50))
    save = min(500, max(total // 4, 1))
    save_every = max(log_every, (save + log_every - 1) // log_every * log_every)
    return log_every, save_every


def check(task: str, data_task: str, names: tuple[str, str], *, max_steps: int | None,
          batch_size: int, padding: str, buckets: int, packing: str = "concat") -> None:
    """Refuse arguments that cannot make a run, each with the fix, before anything is built."""
    model_name, data_name = names
    if task != data_task:
        family = model_name.split("-")[0]
        raise ValueError(f"{model_name} does its task {task!r} but {data_name!r} is a "
                         f"{data_task!r} dataset; pick a matching pair, e.g. "
                         f"wb.model('{family}', task='{data_task}') if the family supports it")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if padding not in PADDINGS:
        raise ValueError(f"unknown padding {padding!r}; known: {', '.join(PADDINGS)}")
    if buckets < 1:
        raise ValueError(f"buckets must be at least 1, got {buckets}")
    if packing not in PACKINGS:
        raise ValueError(f"unknown packing {packing!r}; known: {', '.join(PACKINGS)} "
                         f"(concat: one stream, the GPT-2 recipe; isolated: attention inside each document)")


def check_padding(padding: str, task: str, model_name: str) -> None:
    """Refuse a batching the task cannot use."""
    if padding == "packed" and task != "causal_lm":
        raise ValueError(f"padding='packed' is for causal language models; {model_name} does {task}: "
                         f"use 'bucketed' or 'longest'")
    if padding == "bucketed" and task not in ("classification", "causal_lm"):
        raise ValueError(f"padding='bucketed' handles classification and causal LM; {task} "
                         f"uses 'longest' or 'max_length'")


def cadence(total: int, log_every: int | None, save_every: int | None) -> dict[str, Any]:
    """log_every, save_every and log_interval_s for a run of ``total`` steps.

    ``log_interval_s`` is None for the device's default throttle; an explicit ``log_every``
    is kept exactly (0). Checkpoints land on logging steps, where NaN is checked.
    """
    auto_log, auto_save = auto_steps(total)
    interval = 0.0 if log_every else None
    log_every = log_every or auto_log
    save_every = save_every or auto_save
    if save_every % log_every:
        save_every = (save_every // log_every + 1) * log_every
    return {"log_every": log_every, "save_every": save_every, "log_interval_s": interval}


def total_steps(max_steps: int | None, epochs: float | None, rows: int | None, batch_size: int) -> int:
    """Steps of a run: ``max_steps``, or the epochs over ``rows`` training rows."""
    if max_steps:
        return max_steps
    return max(1, math.ceil((rows or 0) / batch_size) * math.ceil(epochs or 1))


def log_interval(a: dict, device, world_size: int) -> float:
    """Seconds at least between events (0: log at every logging step). The spec's
    ``log_interval_s`` is None for the default cadence: the backend table's interval, in
    one process only (ranks must log at the same steps: the loss is gathered across them)."""
    interval = a.get("log_interval_s", 0.0)  # runs made before the throttle: every step
    if interval is None:
        interval = device.backend.log_interval_s
    return float(interval) if world_size == 1 else 0.0


def compile_on(a: dict, device) -> bool:
    """Whether the run is ``torch.compile``d: ``mode`` decides, else ``compile``, else the
    backend table (HPU eager mode wants torch.compile; elsewhere it is opt-in). HPU lazy
    mode and torch.compile exclude each other: asking for both is refused."""
    if a.get("mode") is not None:
        return a["mode"] == "compile"
    if a["compile"] and device.mode == "lazy":
        raise ValueError("torch.compile does not run in HPU lazy mode (this process is in lazy mode: "
                         "PT_HPU_LAZY_MODE=1); pass compile=False, or restart with mode='compile'")
    if a["compile"] is not None:
        return bool(a["compile"])
    return device.backend.compile_default(device.mode)


def training_arguments(a: dict, device, task: str, run_path: Path, optim: str) -> dict[str, Any]:
    """The TrainingArguments fields for a run's arguments on ``device`` (from the backend table)."""
    precision = device.resolve_precision(a["precision"])
    compile_ = compile_on(a, device)
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
        torch_compile=compile_, label_names=["labels"] if task != "diffusion" else [],
    )
    if compile_ and device.backend.compile_backend:
        targs["torch_compile_backend"] = device.backend.compile_backend
    if world()[1] > 1:
        targs["ddp_backend"] = device.dist_backend
        if device.backend.ddp_find_unused_parameters is not None:
            targs["ddp_find_unused_parameters"] = device.backend.ddp_find_unused_parameters
    targs.update(a["trainer_overrides"])
    return targs


def accuracy(pred) -> dict[str, float]:
    """compute_metrics for classification: accuracy over real rows."""
    import numpy as np

    logits = pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions
    labels = np.asarray(pred.label_ids)
    keep = labels != -100  # dummy rows that fill static-shape batches do not count
    return {"accuracy": float((np.asarray(logits).argmax(-1)[keep] == labels[keep]).mean())}
