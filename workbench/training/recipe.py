"""Recipes: the arguments of a run, checked and completed, and the TrainingArguments they make.

Pure functions of a run's arguments and the device's backend record: nothing here builds a
model, touches a device or writes a file, so every choice can be tested on its own.
"""

from __future__ import annotations

import math
import numbers
import os
from pathlib import Path
from typing import Any

from ..backends.registry import backend
from .batching import PACKINGS

PADDINGS = ("auto", "longest", "max_length", "bucketed", "packed")


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
          batch_size: int, padding: str, buckets: int, packing: str = "concat",
          lr: float | None = None, max_length: int = 128) -> None:
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
    if lr is not None and not (isinstance(lr, numbers.Real) and not isinstance(lr, bool) and lr > 0):  # nor NaN
        raise ValueError(f"lr={lr!r} is not a learning rate: it must be a number above 0 "
                         f"(typical: 1e-3 for a model trained from scratch, 5e-5 to fine-tune)")
    if max_length < 1:
        raise ValueError(f"max_length must be at least 1, got {max_length}")


def samples(task: str, prompts, every: int | None, steps: int, eval_every: int | None) -> dict[str, Any]:
    """The spec's sampling arguments, checked: no prompts, no grids; ``every`` defaults to
    ``eval_every`` (None: a grid at the last step only)."""
    if prompts is None:
        return {"sample_prompts": None, "sample_every": None, "sample_steps": steps}
    if task != "text_to_image":
        raise ValueError(f"sample_prompts is for text-to-image runs (wb.model('sd')); this model does {task!r}: "
                         f"leave sample_prompts out")
    prompts = [prompts] if isinstance(prompts, str) else list(prompts)
    if not prompts or not all(isinstance(p, str) for p in prompts):
        raise ValueError(f"sample_prompts={prompts!r}: pass a list of prompts (strings), "
                         f"e.g. sample_prompts=['a handwritten seven', 'a handwritten one']")
    for name, value in (("sample_every", every), ("sample_steps", steps)):
        if (value is not None or name == "sample_steps") and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name}={value!r}: it must be a whole number of steps, at least 1")
    return {"sample_prompts": prompts, "sample_every": every or eval_every, "sample_steps": steps}


def check_precision(precision: str, device) -> None:
    """Refuse a precision the device would not run as recorded."""
    p = device.resolve_precision(precision)  # unknown names; chips without the format
    # accelerate autocasts to fp16 only off the CPU (its Accelerator leaves native AMP off for
    # a "cpu" device), so fp16 asked for on a CPU would train in fp32 while recording fp16.
    if p == "fp16" and device.backend.torch_device == "cpu":
        raise ValueError("precision='fp16' on cpu: transformers runs no fp16 on a CPU, so the run would "
                         "train in fp32 while recording fp16; use precision='bf16' (autocast on the CPU) "
                         "or 'fp32' (the CPU's default)")


def check_fit(*, batch_size: int, rows: int, data_name: str, padding: str, max_length: int,
              positions: int | None, model_name: str) -> None:
    """Refuse a batch larger than the data, or sequences longer than the model can place."""
    if padding != "packed" and batch_size > rows:  # packed: blocks, not rows, make the batches
        raise ValueError(f"batch_size={batch_size} is more than the {rows} training rows of {data_name!r}: "
                         f"every batch would be mostly dummy rows. Pass batch_size={rows} or less, or use more data")
    if positions is not None and max_length > positions:
        raise ValueError(f"max_length={max_length} is more than {model_name}'s {positions} positions "
                         f"(max_position_embeddings): longer sequences cannot be embedded. "
                         f"Pass max_length={positions} or less")


def check_encoding(encoding: str, source: str, local_text: bool) -> None:
    """Refuse ``encoding=`` where it cannot apply, or a codec Python does not know."""
    import codecs

    if not local_text:
        raise ValueError(f"encoding= is for local text files (csv, json, jsonl, txt); {source!r} is not one")
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise ValueError(f"unknown encoding {encoding!r}; e.g. 'utf-8', 'latin-1', 'cp1252'") from None


def check_eval_labels(train_labels: set, eval_counts: dict, data_name: str) -> None:
    """Refuse eval labels the training split never has (the model could never predict them)."""
    only = [(v, n) for v, n in eval_counts.items() if v not in train_labels]
    if only:
        one = len(only) == 1
        what = ", ".join(f"{v!r} ({n} row{'s' if n > 1 else ''})" for v, n in only[:5])
        them = "it" if one else "them"
        raise ValueError(f"label{'' if one else 's'} {what} {'is' if one else 'are'} in the eval split of "
                         f"{data_name!r} but never in train: the model cannot learn {them}. "
                         f"Add training rows with {them}, or drop those eval rows")


def check_split(rows: int, eval_fraction: float, data_name: str, class_counts: dict | None) -> None:
    """Refuse data that a train/eval split (stratified by class, given ``class_counts``) cannot split."""
    n_eval = math.ceil(eval_fraction * rows)  # as datasets' train_test_split counts
    if rows - n_eval < 1:
        raise ValueError(f"{data_name!r} has {rows} row{'s' if rows != 1 else ''}: too few to split into "
                         f"train and eval (eval_fraction={eval_fraction}); use more rows")
    if not class_counts:
        return
    single = [repr(c) for c, n in class_counts.items() if n < 2]
    if single:
        raise ValueError(f"class {', '.join(single[:5])} has 1 row in {data_name!r}: a stratified train/eval "
                         f"split needs at least 2 rows of each class (one for each split). Add rows of that "
                         f"class, drop it, or give a dataset with its own eval split")
    classes, smaller = len(class_counts), min(n_eval, rows - n_eval)
    if smaller < classes:
        side, fix = (("eval", f"eval_fraction={math.ceil(classes * 100 / rows) / 100:g} or more")
                     if n_eval < classes else ("training", "a smaller eval_fraction"))
        raise ValueError(f"{data_name!r} has {classes} classes, but eval_fraction={eval_fraction} of its "
                         f"{rows} rows gives {smaller} {side} rows, fewer than one per class: pass {fix}, "
                         f"or use more rows")


def check_cache_latents(cache_latents, task: str, model_name: str, crop: str, flip: bool) -> None:
    """Refuse ``cache_latents`` where encodings cannot be kept: not a bool, not a text-to-image
    model, or random crops / flips (another image every epoch, so other latents)."""
    if not isinstance(cache_latents, bool):
        raise TypeError(f"cache_latents must be True or False, got {cache_latents!r}")
    if not cache_latents:
        return
    if task != "text_to_image":
        raise ValueError(f"cache_latents=True keeps a text-to-image model's latents and caption embeddings; "
                         f"{model_name} does {task}: leave cache_latents=False (or train wb.model('sd'))")
    random = [x for x, on in ((f"crop={crop!r}", crop == "random"), ("flip=True", flip)) if on]
    if random:
        raise ValueError(f"cache_latents=True cannot keep the latents of {' and '.join(random)}: a random crop "
                         f"or flip gives another image every epoch, so its latents cannot be encoded once. "
                         f"Train from the cache with wb.dataset(..., crop='center', flip=False), or keep the "
                         f"augmentation with cache_latents=False")


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
        torch_compile=compile_, label_names=["labels"] if task not in ("diffusion", "text_to_image") else [],
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


def check_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides`` if every name is a TrainingArguments field; else one error naming the
    bad ones (a run's model and data are fixed: a new run takes new ones)."""
    import dataclasses

    import transformers

    fields = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    bad = sorted(k for k in overrides if k not in fields)
    if bad:
        import difflib

        hints = [f"{k} (did you mean {m[0]}?)" if (m := difflib.get_close_matches(k, fields, 1)) else k for k in bad]
        raise ValueError(f"not TrainingArguments fields: {', '.join(hints)}. resume() takes max_steps and "
                         f"TrainingArguments fields; a new model or dataset needs a new run (wb.train)")
    return overrides
