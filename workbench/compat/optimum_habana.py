"""Optimum Habana 1.21's training API on transformers 5, through the workbench.

A script written for Optimum Habana changes one import line::

    from workbench.compat.optimum_habana import GaudiConfig, GaudiTrainer, GaudiTrainingArguments

``GaudiTrainingArguments`` (and the Seq2Seq one) is ``transformers.TrainingArguments`` with
every field Optimum Habana 1.21 added, at its defaults, each mapped, refused or warned about as
``gaudi_config.FIELDS`` says (docs/optimum-habana.md shows the table). ``GaudiTrainer`` is a
small ``transformers.Trainer`` subclass overriding only ``create_optimizer`` (the fused AdamW)
and ``save_model`` (``gaudi_config.json`` beside the model); the loop is the Trainer's own.

Facts from huggingface/optimum-habana at 1d8504c6c (1.21.0.dev0):
optimum/habana/transformers/training_args.py (the refusals in ``__post_init__``), trainer.py
(bf16 through ``use_torch_autocast``; ``FusedAdamW`` with the Trainer's decay groups,
``eps=adam_epsilon``; throughput without ``throughput_warmup_steps``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import transformers

from ..backends.hpu import bridge_installed, bridge_loaded, hpu_mode, mode_for_probe
from ..backends.registry import device as pick_device
from ..backends.torchrun import world
from ..training.attachment import Attachment
from ..training.logprinters import quiet as _quiet
from ..training.torchconfig import dynamo_settings, reduced_precision_sdp_math
from ..training.trainer import fused_optimizer
from .callers import notice
from .gaudi_config import (
    CHANGED,
    CONFIG_FIELDS,
    FIELDS,
    GAUDI_CONFIG_NAME,
    MAPPED,
    REFUSED,
    REMOVED,
    WARNED,
    Field,
    GaudiConfig,
    table,
)

__all__ = [  # what scripts import from here (Optimum Habana's names), and the field tables
    "CHANGED",
    "CONFIG_FIELDS",
    "FIELDS",
    "GAUDI_CONFIG_NAME",
    "MAPPED",
    "REFUSED",
    "REMOVED",
    "WARNED",
    "Field",
    "GaudiConfig",
    "GaudiSeq2SeqTrainer",
    "GaudiSeq2SeqTrainingArguments",
    "GaudiTrainer",
    "GaudiTrainingArguments",
    "adapt_transformers_to_gaudi",
    "check_optimum_habana_min_version",
    "set_seed",
    "table",
    "warn0",
]


# --------------------------------------------------------------------------- the arguments
# removed fields transformers 5 cannot honour, whose value a script reads: said once (by
# _check), then set back, in __post_init__, to what runs (trainer_qa.py picks
# self.prediction_loop, which transformers 5's Trainer lacks, on use_legacy_prediction_loop)
_SET_BACK = ("use_legacy_prediction_loop", "save_safetensors")


def _check(args) -> None:
    """Refuse or warn about the fields set away from Optimum Habana's defaults, with why."""
    for name, f in {**FIELDS, **REMOVED}.items():
        value = getattr(args, name)
        if value == f.default or f.how == MAPPED:
            continue
        if f.how == REFUSED:
            raise ValueError(
                f"{name}={value!r} is not supported on transformers 5 by the workbench: {f.what}"
            )
        notice(f"{name}={value!r} is ignored on transformers 5: {f.what}")
    if args.distribution_strategy not in ("ddp", "fast_ddp"):
        raise ValueError(f"distribution_strategy={args.distribution_strategy!r}: pass 'ddp'")
    if args.distribution_strategy == "fast_ddp":
        notice(
            "distribution_strategy='fast_ddp' runs as 'ddp': Optimum Habana's own "
            "all-reduce has no transformers 5 hook"
        )
    if args.half_precision_backend not in ("hpu_amp", "cpu_amp"):
        raise ValueError(
            f"half_precision_backend={args.half_precision_backend!r}: pass 'hpu_amp' or 'cpu_amp'"
        )
    if args.gaudi_config_name is not None and not args.use_habana:
        raise ValueError("gaudi_config_name needs use_habana=True (as in Optimum Habana)")


class _OptimumHabanaFields(transformers.TrainingArguments if TYPE_CHECKING else object):
    """What the arguments classes below add to transformers' own: Optimum Habana's fields
    checked, mapped and applied in ``__post_init__``, before the transformers class's own."""

    # the fields read here that transformers 5 lacks (_arguments_class adds them)
    gaudi_config_name: str | None
    use_habana: bool
    use_lazy_mode: bool
    non_blocking_data_copy: bool
    warmup_ratio: float
    group_by_length: bool
    push_to_hub_model_id: str | None

    def __post_init__(self):
        self._prepare()
        super().__post_init__()

    def _prepare(self) -> None:
        """Check Optimum Habana's fields and apply those that must come before the device is set."""
        _check(self)
        self._map_removed()
        self.gaudi_config = None
        if self.gaudi_config_name is not None:
            self.gaudi_config = GaudiConfig.from_pretrained(self.gaudi_config_name)
        config = self.gaudi_config
        if (
            config is not None
            and config.use_torch_autocast
            and not self.bf16
            and not self.deepspeed
        ):
            self.bf16 = True  # Optimum Habana: use_torch_autocast turns bf16 autocast on
        self.workbench_device = None
        if self.use_habana and not self.use_cpu:
            want = "lazy" if self.use_lazy_mode else "eager"
            # the op lists and the mode go before the device probe below, which loads the bridge:
            # it reads both once, as it loads (a loaded one keeps its mode: said below)
            if bridge_installed() and self.gaudi_config is not None:
                self.gaudi_config.declare_autocast_bf16_fp32_ops()
            with mode_for_probe(want if bridge_installed() and not bridge_loaded() else None):
                dev = pick_device()
            if dev.kind == "hpu" and hpu_mode() != want:
                # Loaded already (current bridges load at `import torch` unless PT_HPU_LAZY_MODE=1):
                # Optimum Habana then runs in the bridge's mode (use_lazy_mode only decides its
                # mark_step calls, which are no-ops in eager mode); the same here, said aloud
                notice(
                    f"use_lazy_mode={self.use_lazy_mode}: the Habana bridge is already loaded in "
                    f"{hpu_mode()} mode (fixed per process; `import torch` loads it unless "
                    f"PT_HPU_LAZY_MODE=1), so this trains in {hpu_mode()} mode. For {want} mode, "
                    f"start Python with PT_HPU_LAZY_MODE={int(want == 'lazy')}"
                )
            if dev.kind != "hpu":
                # a notice, not an error: the same script runs on the GPU or CPU (on stdout: a
                # notebook shows stderr as a pink error box)
                if world()[0] == 0:  # one line, not one a rank
                    print(
                        f"use_habana=True but this machine has no Gaudi: training on {dev.kind}",
                        flush=True,
                    )
                self.use_cpu = dev.kind == "cpu"  # transformers 5 runs bf16 on a CPU only if asked
            compile_backend = dev.backend.policy.compile_backend
            if self.torch_compile and not self.torch_compile_backend and compile_backend:
                self.torch_compile_backend = compile_backend
            self.workbench_device = dev.kind
        if self.non_blocking_data_copy:
            config = (
                dict(self.accelerator_config or {})
                if isinstance(self.accelerator_config, dict)
                else {}
            )
            self.accelerator_config = {**config, "non_blocking": True}

    def _map_removed(self) -> None:
        """In ``__post_init__``: the removed fields that have a transformers 5 counterpart, set
        on it; the ones it cannot honour set back; use_cache as Optimum Habana's scripts set it."""
        if self.warmup_ratio:
            if self.warmup_steps:
                raise ValueError(
                    f"warmup_ratio={self.warmup_ratio!r} and warmup_steps={self.warmup_steps!r} "
                    f"are one field in transformers 5 (warmup_steps below 1 is a ratio): pass "
                    f"only one, e.g. warmup_steps={self.warmup_ratio!r} for the ratio"
                )
            if not 0 < self.warmup_ratio < 1:
                raise ValueError(
                    f"warmup_ratio={self.warmup_ratio!r}: a ratio is in [0, 1) on transformers 5 "
                    f"(warmup_steps below 1); for more, pass warmup_steps=<a number of steps>"
                )
            self.warmup_steps = self.warmup_ratio
        if self.group_by_length:
            if self.train_sampling_strategy not in ("random", "group_by_length"):
                raise ValueError(
                    f"group_by_length=True and train_sampling_strategy="
                    f"{self.train_sampling_strategy!r}: group_by_length is "
                    f"train_sampling_strategy='group_by_length' in transformers 5; pass one"
                )
            self.train_sampling_strategy = "group_by_length"
        if self.push_to_hub_model_id is not None:
            if self.hub_model_id not in (None, self.push_to_hub_model_id):
                raise ValueError(
                    f"push_to_hub_model_id={self.push_to_hub_model_id!r} and hub_model_id="
                    f"{self.hub_model_id!r}: push_to_hub_model_id is hub_model_id in "
                    f"transformers 5; pass only hub_model_id"
                )
            self.hub_model_id = self.push_to_hub_model_id
        for name in _SET_BACK:
            setattr(self, name, REMOVED[name].default)
        # the scripts' own line: use_cache=False if gradient_checkpointing else use_cache
        # (gradient_checkpointing is activation_checkpointing's alias in transformers 5, resolved
        # by its __post_init__, which runs after this)
        checkpointing = self.activation_checkpointing
        if checkpointing if checkpointing is not None else self.gradient_checkpointing:
            self.use_cache = False


def _arguments_class(name: str, base: type) -> type:
    fields = [
        (n, f.type, dataclasses.field(default=f.default))
        for n, f in {**FIELDS, **REMOVED, **CHANGED}.items()
    ]

    cls = dataclasses.make_dataclass(name, fields, bases=(_OptimumHabanaFields, base))
    cls.__module__ = __name__
    cls.__doc__ = (
        f"{base.__name__} with Optimum Habana 1.21's fields (FIELDS says what each "
        f"becomes); HfArgumentParser reads its example scripts' command lines."
    )
    return cls


GaudiTrainingArguments = _arguments_class("GaudiTrainingArguments", transformers.TrainingArguments)
GaudiSeq2SeqTrainingArguments = _arguments_class(
    "GaudiSeq2SeqTrainingArguments", transformers.Seq2SeqTrainingArguments
)


# --------------------------------------------------------------------------- the trainer
@contextlib.contextmanager
def _torch_settings(args) -> Iterator[None]:
    """The process-wide torch settings the arguments name (``sdp_on_bf16``, the dynamo fields),
    held while the Trainer trains, evaluates or predicts, and put back after it."""
    names = ("cache_size_limit", "inline_inbuilt_nn_modules", "allow_unspec_int_on_nn_module")
    dynamo = {n: getattr(args, n) for n in names if getattr(args, n) is not None}
    with contextlib.ExitStack() as scope:
        if getattr(args, "sdp_on_bf16", False):
            scope.callback(reduced_precision_sdp_math(True))
        if dynamo:
            scope.callback(dynamo_settings(**dynamo))
        yield


def _setup(trainer, model, gaudi_config, args, callbacks, optimizers, optimizer_cls_and_kwargs):
    """Optimum Habana's GaudiTrainer set-up, on transformers 5: the Gaudi config applied to
    the arguments, the fused AdamW chosen, the workbench's callback added (once). Returns
    the arguments and the callbacks for the Trainer's constructor."""
    if args is None:
        args = GaudiTrainingArguments(output_dir="tmp_trainer")
    if not hasattr(args, "use_habana"):
        raise TypeError(
            f"args must be GaudiTrainingArguments (this module's), got "
            f"{type(args).__name__}; or use transformers.Trainer with "
            f"wb.training_args(...)"
        )
    if args.save_safetensors is not True:  # run_multitask_prompt_tuning.py sets it here
        notice(
            f"save_safetensors={args.save_safetensors!r} is ignored on transformers 5: "
            f"{REMOVED['save_safetensors'].what}"
        )
    config = gaudi_config or args.gaudi_config or GaudiConfig()
    if config.use_torch_autocast and not args.bf16 and not args.deepspeed:
        args.bf16 = True  # Optimum Habana: use_torch_autocast enables bf16 autocast
    if (config.autocast_bf16_ops or config.autocast_fp32_ops) and args.workbench_device != "hpu":
        notice(
            "autocast_bf16_ops / autocast_fp32_ops are the HPU bridge's lists; "
            "torch.autocast elsewhere uses its own"
        )
    trainer.gaudi_config = config
    # the fused AdamW, over the Trainer's own decay groups, through create_optimizer below
    # (Seq2SeqTrainer's constructor has no optimizer_cls_and_kwargs)
    trainer._gaudi_optimizer = optimizer_cls_and_kwargs
    given = optimizers is not None and optimizers[0] is not None
    if config.use_fused_adam and args.use_habana and not given and not optimizer_cls_and_kwargs:
        trainer._gaudi_optimizer = fused_optimizer(pick_device(args.device.type), args)
    callbacks = list(callbacks or [])
    if not any(isinstance(c, Attachment) for c in callbacks):  # one run, however named
        # wb.callback()'s, given the Trainer (as wb.attach is): its datasets' sizes, known
        callbacks.append(
            Attachment(
                throughput_warmup_steps=args.throughput_warmup_steps or None, trainer=trainer
            )
        )
    return args, callbacks


class GaudiTrainer(transformers.Trainer):
    """Optimum Habana's ``GaudiTrainer``: a ``transformers.Trainer`` with the Gaudi config
    applied and the workbench attached (``wb.callback()``) unless ``callbacks`` has one, in
    Optimum Habana 1.21's argument order (``model, gaudi_config, args, data_collator, ...``;
    ``tokenizer`` is ``processing_class``). With ``use_fused_adam`` on Gaudi it builds hpex's
    FusedAdamW; ``save_model`` writes ``gaudi_config.json`` next to the model."""

    gaudi_config: GaudiConfig  # these two set by _setup
    _gaudi_optimizer: Any

    def __init__(
        self,
        model=None,
        gaudi_config: GaudiConfig | None = None,
        args=None,
        data_collator=None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        model_init=None,
        compute_loss_func=None,
        compute_metrics=None,
        callbacks=None,
        optimizers=(None, None),
        optimizer_cls_and_kwargs=None,
        preprocess_logits_for_metrics=None,
        **kwargs,
    ):
        args, callbacks = _setup(
            self, model, gaudi_config, args, callbacks, optimizers, optimizer_cls_and_kwargs
        )
        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=_processing_class(processing_class, kwargs),
            model_init=model_init,
            compute_loss_func=compute_loss_func,
            compute_metrics=compute_metrics,
            callbacks=callbacks,
            optimizers=optimizers,
            preprocess_logits_for_metrics=preprocess_logits_for_metrics,
            **kwargs,
        )
        attachment = next(c for c in self.callback_handler.callbacks if isinstance(c, Attachment))
        _quiet(self, attachment)  # the logs the dashboard adds are not printed as dicts

    def train(self, *args, **kwargs):
        """The Trainer's own, with the torch settings the arguments name held for the run."""
        with _torch_settings(self.args):
            return super().train(*args, **kwargs)

    def evaluate(self, *args, **kwargs):
        """The Trainer's own (the Seq2SeqTrainer's for GaudiSeq2SeqTrainer), likewise."""
        with _torch_settings(self.args):
            return super().evaluate(*args, **kwargs)

    def predict(self, *args, **kwargs):
        """The Trainer's own (the Seq2SeqTrainer's for GaudiSeq2SeqTrainer), likewise."""
        with _torch_settings(self.args):
            return super().predict(*args, **kwargs)

    def create_optimizer(self, model=None):
        """The Trainer's own, with the fused AdamW where the Gaudi config asks for it
        (transformers documents this method as the subclass's to override)."""
        if self.optimizer is None and self.optimizer_cls_and_kwargs is None:
            self.optimizer_cls_and_kwargs = self._gaudi_optimizer
        return super().create_optimizer(model)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        """The Trainer's own, then ``gaudi_config.json`` beside the model (main process)."""
        super().save_model(output_dir, _internal_call)
        if self.args.should_save:
            self.gaudi_config.save_pretrained(output_dir or str(self.args.output_dir))


class GaudiSeq2SeqTrainer(GaudiTrainer, transformers.Seq2SeqTrainer):
    """``GaudiTrainer`` for sequence-to-sequence models: also a ``transformers.Seq2SeqTrainer``,
    in Optimum Habana's argument order (which has no ``optimizer_cls_and_kwargs``)."""

    def __init__(
        self,
        model=None,
        gaudi_config: GaudiConfig | None = None,
        args=None,
        data_collator=None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        model_init=None,
        compute_loss_func=None,
        compute_metrics=None,
        callbacks=None,
        optimizers=(None, None),
        preprocess_logits_for_metrics=None,
        **kwargs,
    ):
        if args is None:
            args = GaudiSeq2SeqTrainingArguments(output_dir="tmp_trainer")
        super().__init__(
            model,
            gaudi_config,
            args,
            data_collator,
            train_dataset,
            eval_dataset,
            processing_class,
            model_init,
            compute_loss_func,
            compute_metrics,
            callbacks,
            optimizers,
            None,
            preprocess_logits_for_metrics,
            **kwargs,
        )


def _processing_class(processing_class, kwargs):
    """transformers 5 calls the tokenizer ``processing_class``; scripts may pass either."""
    tokenizer = kwargs.pop("tokenizer", None)
    if tokenizer is not None and processing_class is not None:
        raise TypeError("pass tokenizer= or processing_class=, not both (they are one argument)")
    return processing_class if processing_class is not None else tokenizer


# ------------------------------------------------------------------ optimum.habana.utils
def set_seed(seed: int) -> None:
    """``optimum.habana.utils.set_seed``: seeds ``random``, numpy, torch and the device's
    generators (``transformers.set_seed`` seeds the HPU's too on a Gaudi)."""
    transformers.set_seed(seed)


def adapt_transformers_to_gaudi() -> None:
    """``optimum.habana.transformers.modeling_utils.adapt_transformers_to_gaudi``: nothing to
    do, transformers 5's models run on Gaudi as they are."""


def check_optimum_habana_min_version(min_version: str) -> None:
    """``optimum.habana.utils.check_optimum_habana_min_version``: passes (the workbench carries
    1.21's training API)."""


def warn0(message, *args, **kwargs) -> None:
    """``optimum.habana.utils.warn0``: ``warnings.warn`` on the main process only (rank 0
    of torchrun's world), pointing at the caller's line."""
    if world()[0] == 0:
        kwargs.setdefault("stacklevel", 2)
        warnings.warn(message, *args, **kwargs)
