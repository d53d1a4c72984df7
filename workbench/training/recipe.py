"""Recipes: the arguments of a run, checked and completed, and the TrainingArguments they make:
pure functions of the arguments and the backend record (no model, device or file touched).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

from ..backends.registry import backend
from ..backends.torchrun import world
from ..runargs import RunArgs


def default_padding(task: str, device_kind: str) -> str:
    """The batching a task gets on a backend when the user does not choose: causal LM packs,
    classification is bucketed; seq2seq pads to max_length on Gaudi (a graph per new shape),
    else to each batch's longest row.
    """
    if task == "causal_lm":
        return "packed"
    if task == "classification":
        return "bucketed"
    if task == "seq2seq":
        return "max_length" if backend(device_kind).policy.static_shapes else "longest"
    return "longest"  # images: every batch already has one shape


def auto_steps(total: int) -> tuple[int, int]:
    """(log_every, save_every) for a run of ``total`` steps; save is a multiple of log."""
    log_every = max(1, min(25, total // 50))
    save = min(500, max(total // 4, 1))
    save_every = max(log_every, (save + log_every - 1) // log_every * log_every)
    return log_every, save_every


# The default cadence also logs when the last event is this old, or LIVE_GAP_SHARE of the time
# trained so far when that is longer: about 50 events per tenfold of a run's length.
LIVE_GAP_S = 2.0
LIVE_GAP_SHARE = 0.02


def live_gap(elapsed: float) -> float:
    """Seconds without an event after which the default cadence logs, ``elapsed`` seconds
    into training."""
    return max(LIVE_GAP_S, LIVE_GAP_SHARE * elapsed)


def throughput_warmup(given: int | None, log_every: int) -> int:
    """Steps left out of the throughput figures (compilation, warm caches): ``given``, else
    at least 3 and at least the first logging interval, whoever built the Trainer."""
    return max(3, log_every) if given is None else given


def check(task: str, data_task: str, names: tuple[str, str]) -> None:
    """Refuse a model and a dataset that do not make a run together, with the fix (the
    arguments' own values are ``RunArgs``' to check)."""
    model_name, data_name = names
    if task != data_task:
        family = model_name.split("-")[0]
        raise ValueError(
            f"{model_name} does its task {task!r} but {data_name!r} is a "
            f"{data_task!r} dataset; pick a matching pair, e.g. "
            f"wb.model('{family}', task='{data_task}') if the family supports it"
        )


def samples(
    task: str, prompts, every: int | None, steps: int, eval_every: int | None
) -> dict[str, Any]:
    """The spec's sampling arguments, checked: no prompts, no grids; ``every`` defaults to
    ``eval_every`` (None: a grid at the last step only)."""
    if prompts is None:
        return {"sample_prompts": None, "sample_every": None, "sample_steps": steps}
    if task != "text_to_image":
        raise ValueError(
            f"sample_prompts is for text-to-image runs (wb.model('sd')); this model does {task!r}: "
            f"leave sample_prompts out"
        )
    prompts = [prompts] if isinstance(prompts, str) else list(prompts)
    if not prompts or not all(isinstance(p, str) for p in prompts):
        raise ValueError(
            f"sample_prompts={prompts!r}: pass a list of prompts (strings), "
            f"e.g. sample_prompts=['a handwritten seven', 'a handwritten one']"
        )
    for name, value in (("sample_every", every), ("sample_steps", steps)):
        if (value is not None or name == "sample_steps") and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(f"{name}={value!r}: it must be a whole number of steps, at least 1")
    return {"sample_prompts": prompts, "sample_every": every or eval_every, "sample_steps": steps}


def check_precision(precision: str, device) -> None:
    """Refuse a precision the device would not run as recorded."""
    p = device.resolve_precision(precision)  # unknown names; chips without the format
    note = device.backend.policy.precision_notes.get(p)
    if note:  # runs, at a cost the backend names
        warnings.warn(note, UserWarning, stacklevel=4)
    # accelerate autocasts to fp16 only off the CPU (its Accelerator leaves native AMP off for
    # a "cpu" device), so fp16 asked for on a CPU would train in fp32 while recording fp16.
    if p == "fp16" and device.backend.torch_device == "cpu":
        raise ValueError(
            "precision='fp16' on cpu: transformers runs no fp16 on a CPU, so the run would "
            "train in fp32 while recording fp16; use precision='bf16' (autocast on the CPU) "
            "or 'fp32' (the CPU's default)"
        )


def check_fit(
    *,
    batch_size: int,
    rows: int,
    data_name: str,
    padding: str,
    max_length: int,
    positions: int | None,
    model_name: str,
) -> None:
    """Refuse a batch larger than the data, or sequences longer than the model can place."""
    if padding != "packed" and batch_size > rows:  # packed: blocks, not rows, make the batches
        raise ValueError(
            f"batch_size={batch_size} is more than the {rows} training rows of {data_name!r}: "
            f"every batch would be mostly dummy rows. Pass batch_size={rows} or less, or use more "
            "data"
        )
    if positions is not None and max_length > positions:
        raise ValueError(
            f"max_length={max_length} is more than {model_name}'s {positions} positions "
            f"(max_position_embeddings): longer sequences cannot be embedded. "
            f"Pass max_length={positions} or less"
        )


def check_blocks(chunk_tokens: list[int], max_length: int, rows: int, data_name: str) -> None:
    """Refuse packed data that makes no full block of ``max_length`` tokens: no training
    step (``batching.chunk_tokens`` counts the tokens of each chunk ``pack`` packs)."""
    if chunk_tokens and chunk_tokens[-1] >= max_length:
        return
    tokens, most = sum(chunk_tokens), max(chunk_tokens, default=0)
    smaller = f"pass max_length={most} or less" if most >= 2 else "use longer rows"
    raise ValueError(
        f"{data_name!r} makes no training block: padding='packed' joins its {rows} training "
        f"row{'s' * (rows != 1)} into {tokens} tokens (an end-of-text token after each) and "
        f"cuts them into blocks of max_length={max_length}, so nothing is left to train on. "
        f"Use more text, or {smaller}"
    )


def check_cache_latents(cache_latents, task: str, model_name: str, crop: str, flip: bool) -> None:
    """Refuse ``cache_latents`` where encodings cannot be kept: not a bool, not a text-to-image
    model, or random crops / flips (another image every epoch, so other latents)."""
    if not isinstance(cache_latents, bool):
        raise TypeError(f"cache_latents must be True or False, got {cache_latents!r}")
    if not cache_latents:
        return
    if task != "text_to_image":
        raise ValueError(
            f"cache_latents=True keeps a text-to-image model's latents and caption embeddings; "
            f"{model_name} does {task}: leave cache_latents=False (or train wb.model('sd'))"
        )
    random = [x for x, on in ((f"crop={crop!r}", crop == "random"), ("flip=True", flip)) if on]
    if random:
        raise ValueError(
            f"cache_latents=True cannot keep the latents of {' and '.join(random)}: a random crop "
            f"or flip gives another image every epoch, so its latents cannot be encoded once. "
            f"Train from the cache with wb.dataset(..., crop='center', flip=False), or keep the "
            f"augmentation with cache_latents=False"
        )


def check_padding(padding: str, task: str, model_name: str) -> None:
    """Refuse a batching the task cannot use."""
    if padding == "packed" and task != "causal_lm":
        raise ValueError(
            f"padding='packed' is for causal language models; {model_name} does {task}: "
            f"use 'bucketed' or 'longest'"
        )
    if padding == "bucketed" and task not in ("classification", "causal_lm"):
        raise ValueError(
            f"padding='bucketed' handles classification and causal LM; {task} "
            f"uses 'longest' or 'max_length'"
        )


def cadence(total: int, log_every: int | None, save_every: int | None) -> dict[str, Any]:
    """log_every, save_every and log_interval_s for a run of ``total`` steps (None: the
    device's throttle; an explicit ``log_every``: 0). Checkpoints land on logging steps."""
    auto_log, auto_save = auto_steps(total)
    interval = 0.0 if log_every else None
    log_every = log_every or auto_log
    save_every = save_every or auto_save
    if save_every % log_every:
        save_every = (save_every // log_every + 1) * log_every
    return {"log_every": log_every, "save_every": save_every, "log_interval_s": interval}


def total_steps(
    max_steps: int | None, epochs: float | None, rows: int | None, batch_size: int
) -> int:
    """Steps of a run: ``max_steps``, or the epochs over ``rows`` training rows."""
    if max_steps:
        return max_steps
    return max(1, math.ceil((rows or 0) / batch_size) * math.ceil(epochs or 1))


def log_interval(args: RunArgs, device, world_size: int) -> float:
    """Seconds at least between events (0: every logging step): the spec's, else the backend
    table's in one process only (ranks must log at the same steps)."""
    interval = args.log_interval_s
    if interval is None:
        interval = device.backend.policy.log_interval_s
    return float(interval) if world_size == 1 else 0.0


def timed_logging(args: RunArgs, world_size: int) -> bool:
    """Whether a run also logs after ``live_gap`` seconds without an event: the default
    cadence (no ``log_every`` given), in one process only (ranks log at the same steps)."""
    return args.log_interval_s is None and world_size == 1


def compile_on(args: RunArgs, device) -> bool:
    """Whether the run is ``torch.compile``d: ``mode`` decides, else ``compile``, else the
    backend table (HPU eager mode wants torch.compile; elsewhere it is opt-in). HPU lazy
    mode and torch.compile exclude each other: asking for both is refused."""
    if args.mode is not None:
        return args.mode == "compile"
    if args.compile and device.mode == "lazy":
        raise ValueError(
            "torch.compile does not run in HPU lazy mode (this process is in lazy mode: "
            "PT_HPU_LAZY_MODE=1); pass compile=False, or restart with mode='compile'"
        )
    if args.compile is not None:
        return bool(args.compile)
    return device.backend.policy.compile_default(device.mode)


def training_arguments(
    args: RunArgs, device, task: str, run_path: Path, optim: str
) -> dict[str, Any]:
    """The TrainingArguments fields for a run's arguments on ``device`` (from the backend table)."""
    compile_ = compile_on(args, device)
    targs = dict(
        output_dir=str(run_path / "checkpoints"),
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        learning_rate=args.lr,
        max_steps=args.max_steps or -1,
        num_train_epochs=args.epochs or 1,
        logging_steps=args.log_every,
        # Gaudi's lazy mode compiles the logging path's small graphs (the loss tally's mean
        # and reset) at the first log: log step 1 too, so that they compile in warm-up
        logging_first_step=device.mode == "lazy",
        logging_nan_inf_filter=False,
        eval_strategy="steps" if args.eval_every else "no",
        eval_steps=args.eval_every,
        save_strategy="steps",
        save_steps=args.save_every,
        save_total_limit=2,
        optim=optim,
        seed=args.seed,
        data_seed=args.seed,
        report_to=args.report_to or "none",
        disable_tqdm=True,
        remove_unused_columns=False,
        dataloader_num_workers=0,
        prediction_loss_only=task != "classification",
        max_grad_norm=1.0,
        label_names=["labels"] if task not in ("diffusion", "text_to_image") else [],
        **device_fields(device, device.resolve_precision(args.precision), compile_),
    )
    targs.update(args.trainer_overrides)
    return targs


def optim_name(device) -> str:
    """The TrainingArguments ``optim`` for ``device`` (the hpex optimizer is no transformers
    name: the Trainer gets it through ``optimizer_cls_and_kwargs``, ``trainer.fused_optimizer``)."""
    return (
        "adamw_torch"
        if device.backend.policy.optimizer == "hpex_fused_adamw"
        else device.backend.policy.optimizer
    )


def device_fields(device, precision: str, compile_: bool) -> dict[str, Any]:
    """The TrainingArguments fields the backend record decides (``wb.train``,
    ``wb.training_args``): precision, CPU, torch.compile, and DDP for several processes."""
    targs: dict[str, Any] = dict(
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        use_cpu=device.kind == "cpu",
        torch_compile=compile_,
    )
    if compile_ and device.backend.policy.compile_backend:
        targs["torch_compile_backend"] = device.backend.policy.compile_backend
    if world()[1] > 1:
        targs["ddp_backend"] = device.dist_backend
        if device.backend.policy.ddp_find_unused_parameters is not None:
            targs["ddp_find_unused_parameters"] = device.backend.policy.ddp_find_unused_parameters
    return targs
