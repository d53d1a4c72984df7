"""The Trainer of a run: model, batches, optimizer, arguments and callbacks, from its spec."""

from __future__ import annotations

import ast
import contextlib
import logging
import sys
import threading
from typing import TYPE_CHECKING, Any

from ..backends.registry import DeviceInfo
from ..backends.torchrun import world
from ..catalog.modelspec import ModelSpec
from ..data.dataset import DataSpec
from ..runargs import RunArgs
from ..rundir.run import STOP_FILE, RunDir
from . import recipe
from .attention import (
    causal_sdpa,
    masked_sdpa,
    quiet_missing_mask_warning,
    without_cache,
    without_padding_check,
)

if TYPE_CHECKING:  # the callbacks import transformers: build() imports them
    from .callbacks import Events


def _name_the_loss(model) -> None:
    """Give a model whose class names no loss (GPT-2's LM head) transformers' fallback loss
    through its documented setter: the fallback warns in every forward (transformers 5.24
    modeling_utils.py:4778), a graph break under torch.compile."""
    if getattr(model, "loss_type", "") is not None or not hasattr(type(model), "loss_function"):
        return
    from transformers.loss.loss_utils import LOSS_MAPPING

    model.loss_function = LOSS_MAPPING["ForCausalLM"]  # what the property picks for None


def _name_the_problem(model) -> None:
    """Set a classifier's ``config.problem_type`` as its first forward would (transformers 5.24
    ``models/bert/modeling_bert.py:1115-1121``): under torch.compile that change of a guarded
    value compiled the model again."""
    config = getattr(model, "config", None)
    if config is not None and getattr(config, "problem_type", "") is None:
        single = getattr(config, "num_labels", 2) > 1
        config.problem_type = "single_label_classification" if single else "regression"


def _model(mspec: ModelSpec, dspec: DataSpec, run: RunDir, precision: str) -> tuple[Any, Any]:
    """The model and tokenizer of a run (LoRA-wrapped; diffusion: the denoising module;
    text_to_image: the text-conditioned objective and the model's ``Captions``)."""
    if mspec.task == "text_to_image":
        from ..diffusion.texttoimage import from_spec

        model = from_spec(mspec, precision)
        return model, model.captions
    model, tok = mspec.build(num_labels=dspec.num_labels)
    if mspec.lora is not None:
        base = run.path / "base"
        if not mspec.is_pretrained:  # adapters alone cannot rebuild a random base: keep it
            if (base / "config.json").exists():
                from ..rundir.checkpoint import load_base

                model = load_base(mspec, base)
            else:
                model.save_pretrained(str(base))
        _name_the_loss(model)
        model = mspec.wrap_lora(model)
    else:
        _name_the_loss(model)
    if mspec.task == "classification":  # the model that trains (a LoRA base: loaded above)
        _name_the_problem(model)
    if mspec.task == "diffusion":
        from ..diffusion.denoising import DiffusionModel

        model = DiffusionModel(model)
    return model, tok


def _batches(args: RunArgs, task: str, prepared, tok, model):
    """(data, collator, batch sampler or None, keys to drop, attention restore or None)."""
    from ..shapes import batching

    padding = args.padding
    if padding == "packed":  # causal LM: documents in full blocks, one static shape
        packing = args.packing
        prepared = batching.pack(prepared, args.max_length, tok.eos_token_id, packing=packing)
        assert not isinstance(prepared, list)  # a DatasetDict packs into one
        inner = batching.BucketCollator(tok, [args.max_length], args.batch_size, task=task)
        quiet_missing_mask_warning()
        if packing == "isolated":
            # No mask, positions restarting at each document, no KV cache: transformers then
            # builds a block-diagonal causal mask from the positions (masking_utils'
            # find_packed_sequence_indices), so attention stays inside each document.
            restore = _both(without_cache(model), without_padding_check(model))
            return prepared, inner, None, ("attention_mask",), restore
        # concat: rows are right-padded and attention is causal, so the mask (ones, but for
        # dummy rows whose labels are -100) changes no loss; without it and without
        # position_ids SDPA is told to be causal instead of being handed a mask tensor.
        restore = _both(causal_sdpa(model), without_padding_check(model))
        return prepared, inner, None, ("attention_mask", "position_ids"), restore
    if padding == "bucketed":  # at most k static shapes (on Gaudi: at most k graph compiles)
        from ..shapes.buckets import BucketBatchSampler, buckets, lengths_of

        rank, size = world()
        lengths = lengths_of(prepared["train"])
        bounds = buckets(
            lengths, k=args.buckets, max_length=args.max_length, batch_size=args.batch_size
        )
        if bounds[-1] < args.max_length:  # eval rows may be longer than every training row
            bounds.append(args.max_length)
        inner = batching.BucketCollator(tok, bounds, args.batch_size, task=task)
        sampler = BucketBatchSampler(
            lengths, bounds, args.batch_size, seed=args.seed, num_replicas=size, rank=rank
        )
        return prepared, inner, sampler, (), None
    labels = None
    if task == "seq2seq" and padding == "max_length":  # one label length: the data's longest
        from ..shapes.buckets import lengths_of

        labels = max(int(lengths_of(p, "labels").max()) for p in prepared.values() if len(p))
    inner = batching.collator(task, tok, model, padding, args.max_length, labels)
    return prepared, inner, None, (), None


def _images(model, dspec: DataSpec, prepared, device: DeviceInfo, args: RunArgs):
    """(data, collator) of a text-to-image run: images and caption ids (one resolution, fixed
    caption length: static shapes), or with ``cache_latents`` their cached encodings."""
    if args.cache_latents:
        from ..diffusion.latentcache import cached, collate

        splits, _ = cached(model, dspec, prepared, device, device.resolve_precision(args.precision))
        return splits, collate
    from ..diffusion.images import Augment

    return prepared, Augment(model.captions.resolution, dspec.crop, dspec.flip)


def fused_optimizer(device: DeviceInfo, args):
    """The Trainer's ``optimizer_cls_and_kwargs`` for the backend's fused AdamW; None for
    ``optim``."""
    # The Trainer builds it, after moving the model to the device, from its own decay /
    # no-decay groups, with betas and eps from the TrainingArguments. Not under DeepSpeed:
    # ZeRO wraps the Trainer's own optimizer and clips with gradient_clipping (docs/gaudi.md).
    if device.backend.policy.optimizer != "hpex_fused_adamw" or getattr(args, "deepspeed", None):
        return None
    from ..backends._bridge import fused_adamw

    return fused_adamw(), {
        "lr": args.learning_rate,
        "betas": (args.adam_beta1, args.adam_beta2),
        "eps": args.adam_epsilon,
    }  # not the bridge's eps default (1e-6)


def _room_for_shapes(inner, static: bool):
    """Raise dynamo's recompile limit to a graph per static shape, + 2, for this run (and, on a
    device that compiles per shape, static graphs); returns the function that restores it."""
    # Past the limit (8 by default) dynamo runs the model uncompiled: slow on Gaudi.
    from .torchconfig import dynamo_settings, raise_recompile_limit

    shapes = len(getattr(inner, "boundaries", ())) or 1  # bucketed / packed: the boundaries
    restore = raise_recompile_limit(2 * shapes + 2)
    if not static:
        return restore
    # Dynamo's automatic dynamic shapes would trace the second shape as a symbolic graph that
    # every later shape reaches first, so warmed-up buckets compiled again after warm-up.
    # vllm-gaudi compiles with dynamic=False, sizes dynamo's cache to a graph per bucket and
    # warms up every bucket (vllm_gaudi/utils.py HPUCompileConfig, v1/worker/hpu_model_runner.py
    # warmup_model @ 091bbad): here too (loaders.py).
    return _both(restore, dynamo_settings(automatic_dynamic_shapes=False))


def build(
    run: RunDir,
    device: DeviceInfo,
    stop: threading.Event,
    extra_callbacks: list | tuple = (),
    *,
    trust_remote_code: bool = False,
):
    """(trainer, events callback, attention restore or None) for ``run``'s spec on ``device``;
    ``stop`` is the run's stop flag, ``trust_remote_code`` the caller's, never the spec's."""
    import transformers

    from .callbacks import DistStop, Events, MarkStep, Samples
    from .loaders import BatchSamplerTrainer

    spec = run.spec
    mspec, dspec = run.model_spec(trust_remote_code), DataSpec.from_dict(spec.data)
    args = spec.args
    # read once for all below, quietly: the call that made the run said what it dropped
    dspec.load(warn=False)
    transformers.set_seed(args.seed)
    model, tok = _model(mspec, dspec, run, device.resolve_precision(args.precision))
    prepared, inner, sampler, drop, restore = _batches(
        args, mspec.task, dspec.prepare(tok, max_length=args.max_length), tok, model
    )
    if mspec.task == "text_to_image":
        prepared, inner = _images(model, dspec, prepared, device, args)
    elif args.padding != "packed" and device.backend.policy.static_shapes:  # no read to skip a mask
        restore = _both(restore, masked_sdpa(model))
    from ..shapes.batching import CountingCollator

    counter = CountingCollator(inner, model, drop=drop)
    targs = recipe.training_arguments(args, device, mspec.task, run.path, recipe.optim_name(device))
    training_args = transformers.TrainingArguments(**targs)
    # Gradient clipping stays the Trainer's (max_grad_norm): transformers computes the norm at
    # every optimizer step anyway, to log it, so a fused clip on top would compute it twice.
    rank, size = world()
    warmup, log_every = args.throughput_warmup_steps, args.log_every
    assert warmup is not None and log_every is not None  # preparation settled them
    events = Events(
        run.log,
        stop,
        mspec.task,
        device,
        counter,
        args.batch_size,
        warmup,
        size,
        min_interval=recipe.log_interval(args, device, size),
        stop_file=run.path / STOP_FILE if size == 1 else None,
        gap=recipe.live_gap if recipe.timed_logging(args, size) else None,
    )
    callbacks: list[transformers.TrainerCallback] = [events]
    if size > 1:
        callbacks.insert(0, DistStop(stop, run.path / STOP_FILE, log_every))
    if args.sample_prompts and rank == 0:  # sample grids: the main process only
        callbacks.append(
            Samples(
                run.log,
                args.sample_prompts,
                args.sample_every,
                args.sample_steps,
                args.seed,
                device,
                exclude=events.exclude,
            )
        )
    if device.mode == "lazy":  # Gaudi's legacy graph mode (other backends have no mode)
        callbacks.append(MarkStep(device))
    # a batch sampler of our own (bucketed): the Trainer subclass that loads from it
    extra: dict[str, Any] = {} if sampler is None else {"batch_sampler": sampler}
    if sampler is not None and device.backend.policy.static_shapes:  # every bucket before step 1
        extra.update(warmup_collator=inner, mark_step=device.mark_step)
    trainer_class = transformers.Trainer if sampler is None else BatchSamplerTrainer
    trainer = trainer_class(
        model=model,
        args=training_args,
        train_dataset=prepared["train"],
        eval_dataset=prepared["eval"],
        data_collator=counter,
        processing_class=tok if mspec.task not in ("diffusion", "text_to_image") else None,
        callbacks=callbacks + list(extra_callbacks),
        optimizer_cls_and_kwargs=fused_optimizer(device, training_args),
        compute_metrics=accuracy if mspec.task == "classification" else None,
        **extra,
    )
    trainer.remove_callback(transformers.PrinterCallback)  # events replace its printed dicts
    if targs["torch_compile"]:  # last: nothing below can fail and leave the limit raised
        static = sampler is not None and device.backend.policy.static_shapes
        restore = _both(restore, _room_for_shapes(inner, static))
    run.hold(model, tok)
    return trainer, events, restore


def _both(first, second):
    """One restore function that runs ``first`` (if any), then ``second``."""
    if first is None or second is None:
        return second if first is None else first

    def restore():
        first()
        second()

    return restore


MISSING_KEYS = "There were missing keys in the checkpoint model loaded: "  # transformers' Trainer


class _TiedOnly(logging.Filter):
    """Drops a resume's missing-keys warning when every key it names is tied to one that loaded
    (GPT-2's ``lm_head.weight``: safetensors keeps a tied weight once)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        if not text.startswith(MISSING_KEYS):
            return True
        try:
            missing = set(ast.literal_eval(text[len(MISSING_KEYS) :].rstrip(".")))
        except (ValueError, SyntaxError):
            return True
        model = getattr(self.model, "get_base_model", lambda: self.model)()
        tied = getattr(model, "all_tied_weights_keys", None) or {}  # target -> source (tied now)
        return not (missing and all(k in tied and tied[k] not in missing for k in missing))


@contextlib.contextmanager
def tied_keys_quiet(model):
    """While training ``model``: no missing-keys warning for weights tied to loaded ones."""
    logger, drop = logging.getLogger("transformers.trainer"), _TiedOnly(model)
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def outcome(
    run: RunDir, stop: threading.Event, events: Events, status: str
) -> tuple[str, str | None]:
    """The final status and error after ``trainer.train`` returned."""
    if events.nan_step is not None:
        lr = run.spec.args.lr
        assert lr is not None  # preparation settled it
        error = (
            f"the loss became {events.last.get('loss')} at step {events.nan_step}; training "
            "stopped and "
            f"the last good checkpoint was kept. Likely fixes: a lower learning rate "
            f"(lr={lr / 10:g}), precision='bf16' instead of 'fp16', or gradient "
            f"clipping (max_grad_norm=1.0)."
        )
        print(error, file=sys.stderr, flush=True)
        return "failed", error
    if status == "completed" and stop.is_set():
        return "stopped", None
    return status, None


def summary(
    run: RunDir,
    trainer,
    device: DeviceInfo,
    events: Events | None,
    status: str,
    error,
    tb,
    wall: float,
) -> dict:
    """The end of a run's summary: status, steps, time, memory, loss, throughput."""
    state = trainer.state if trainer is not None else None
    mem = device.memory()
    summary = {
        "status": status,
        "error": error,
        "traceback": tb,
        "step": state.global_step if state else 0,
        "max_steps": state.max_steps if state else run.spec.args.max_steps,
        "wall_time_s": wall,
        "mem_peak": mem["peak"],
        "mem_total": mem["total"],
        "checkpoint": str(run.last_checkpoint) if run.last_checkpoint else None,
    }
    if events is not None:
        summary.update(
            {
                "train_loss": events.last.get("loss"),
                "eval": events.eval,
                **events.throughput(),
                "compiles": events.last.get("compiles"),
                "dynamo_graphs": events.last.get("dynamo_graphs"),
                "after_warmup": events.counts(),
            }
        )
    if cache := getattr(getattr(trainer, "model", None), "latent_cache", None):  # text to image
        summary["latent_cache"] = cache
    return summary


def error_text(e: BaseException, device: DeviceInfo) -> str:
    """A run's error for its summary; out-of-memory errors name the cheapest fixes."""
    text = f"{type(e).__name__}: {e}"
    if device.backend.policy.oom_marker in str(e):  # the backend table knows each device's OOM text
        text += (
            f" -- out of {device.kind} memory: wb.plan_memory(...) names the cheapest fix "
            f"(a smaller batch_size, gradient_checkpointing=True, precision='bf16')"
        )
    return text


def accuracy(pred) -> dict[str, float]:
    """compute_metrics for classification: accuracy over real rows."""
    import numpy as np

    logits = pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions
    labels = np.asarray(pred.label_ids)
    keep = labels != -100  # dummy rows that fill static-shape batches do not count
    return {"accuracy": float((np.asarray(logits).argmax(-1)[keep] == labels[keep]).mean())}
