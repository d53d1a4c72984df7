"""Optimum Habana 1.21's training API on transformers 5, through the workbench.

A script written for Optimum Habana changes one import line::

    from workbench.compat.optimum_habana import GaudiConfig, GaudiTrainer, GaudiTrainingArguments

``GaudiTrainingArguments`` (and ``GaudiSeq2SeqTrainingArguments``) are
``transformers.TrainingArguments`` with every field Optimum Habana 1.21 added, at its
defaults, so ``HfArgumentParser`` reads the example scripts' command lines as before. Each
field is mapped onto transformers 5 and the workbench, or refused or warned about with the
reason and the replacement: ``FIELDS`` says which, and docs/optimum-habana.md shows it as a
table (a test checks both against 1.21's source). ``GaudiTrainer`` (and
``GaudiSeq2SeqTrainer``) returns a plain ``transformers.Trainer`` composed with the
workbench (its fused AdamW, ``wb.callback()``): nothing is subclassed.

Facts from huggingface/optimum-habana at 1d8504c6c (main after v1.20.0, version 1.21.0.dev0:
the nearest to 1.21 there is): optimum/habana/transformers/training_args.py (the fields and
defaults below, the refusals in ``__post_init__``), gaudi_configuration.py (``GaudiConfig``),
trainer.py (bf16 through ``use_torch_autocast``; ``FusedAdamW`` with the Trainer's decay
groups, ``eps=adam_epsilon``; throughput without ``throughput_warmup_steps``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import transformers

from .. import settings
from ..backends.hpu import bridge_installed, bridge_loaded, hpu_mode, set_hpu_mode
from ..backends.registry import device as pick_device
from ..backends.torchrun import world
from ..training.attachment import Attachment, callback
from ..training.attachment import quiet as _quiet
from ..training.trainer import fused_optimizer

GAUDI_CONFIG_NAME = "gaudi_config.json"
MAPPED, WARNED, REFUSED = "mapped", "warned", "refused"


@dataclasses.dataclass(frozen=True)
class Field:
    """One field of Optimum Habana 1.21's GaudiTrainingArguments: its type and default
    there, and what the workbench does with it (``how``: mapped, warned or refused)."""

    type: Any
    default: Any
    how: str
    what: str  # what it becomes, or why not and what to use instead


_PROFILE = (
    "Optimum Habana's own profiler hook in its Trainer loop; profile with "
    "wb.profile(model, data) or transformers' own torch.profiler callback"
)
_GRAPHS = (
    "HPU graphs wrapped GaudiTrainer's model; the transformers 5 Trainer runs the model "
    "itself: Gaudi's graphs come from lazy mode (use_lazy_mode) or torch.compile with "
    "hpu_backend (use_lazy_mode=False, torch_compile=True)"
)
_FLASH = (
    "an option of Optimum Habana's patched models for Gaudi's fused SDPA kernel; "
    "transformers 5 models call torch's SDPA (attn_implementation='sdpa')"
)
_COMPILE = (
    "GaudiTrainer's own compile hook; torch_compile=True compiles the whole model "
    "(with hpu_backend on Gaudi)"
)

FIELDS: dict[str, Field] = {
    "use_habana": Field(
        bool,
        False,
        MAPPED,
        "train on the best device: the HPU where there is "
        "one (else the GPU or CPU, with a warning)",
    ),
    "gaudi_config_name": Field(
        str | None,
        None,
        MAPPED,
        "a gaudi_config.json file or the "
        "directory holding it, read by GaudiConfig (no hub at run time: "
        "download Habana/<model>'s gaudi_config.json once)",
    ),
    "use_lazy_mode": Field(
        bool,
        True,
        MAPPED,
        "Gaudi's execution mode: lazy (True) or eager "
        "(False), set before the HPU is touched (wb.train's mode=)",
    ),
    "use_hpu_graphs": Field(bool, False, WARNED, "deprecated in 1.21 already; " + _GRAPHS),
    "use_hpu_graphs_for_inference": Field(bool, False, WARNED, _GRAPHS),
    "use_hpu_graphs_for_training": Field(bool, False, WARNED, _GRAPHS),
    "use_compiled_autograd": Field(bool, False, WARNED, _COMPILE),
    "compile_from_sec_iteration": Field(bool, False, WARNED, _COMPILE),
    "compile_dynamic": Field(
        bool | None,
        None,
        WARNED,
        "no TrainingArguments field in transformers 5; static shapes come from wb.bucket_collator",
    ),
    "use_zero3_leaf_promotion": Field(
        bool,
        False,
        WARNED,
        "a DeepSpeed ZeRO-3 compile hook of GaudiTrainer; set leaf modules in the DeepSpeed config",
    ),
    "cache_size_limit": Field(int | None, None, MAPPED, "torch._dynamo.config's recompile limit"),
    "use_regional_compilation": Field(bool, False, WARNED, _COMPILE),
    "inline_inbuilt_nn_modules": Field(
        bool | None, None, MAPPED, "torch._dynamo.config.inline_inbuilt_nn_modules"
    ),
    "allow_unspec_int_on_nn_module": Field(
        bool | None, None, MAPPED, "torch._dynamo.config.allow_unspec_int_on_nn_module"
    ),
    "disable_tensor_cache_hpu_graphs": Field(bool, False, WARNED, _GRAPHS),
    "max_hpu_graphs": Field(int | None, None, WARNED, _GRAPHS),
    "distribution_strategy": Field(
        str,
        "ddp",
        MAPPED,
        "ddp: DistributedDataParallel under "
        "torchrun (wb.launch); fast_ddp (Optimum Habana's own "
        "all-reduce) warns and runs DDP",
    ),
    "context_parallel_size": Field(
        int,
        1,
        REFUSED,
        "context parallelism was GaudiTrainer's "
        "own (Llama only); above 1 it is refused: use one rank per "
        "sequence, or DeepSpeed through wb.launch(strategy='deepspeed')",
    ),
    "minimize_memory": Field(
        bool,
        False,
        REFUSED,
        "an FP8 memory option of Optimum Habana; FP8 training is not supported: train in bf16",
    ),
    "throughput_warmup_steps": Field(
        int,
        0,
        MAPPED,
        "wb.callback(throughput_warmup_steps=): those steps leave the run's throughput",
    ),
    "adjust_throughput": Field(
        bool,
        False,
        MAPPED,
        "always on: the run's throughput leaves evaluation and checkpoint time out",
    ),
    "pipelining_fwd_bwd": Field(
        bool,
        False,
        WARNED,
        "a mark_step between forward and backward "
        "inside GaudiTrainer's step; the transformers 5 Trainer has no "
        "hook there (lazy mode marks after backward and the optimizer)",
    ),
    "ignore_eos": Field(
        bool,
        True,
        WARNED,
        "a generate() option of GaudiSeq2SeqTrainer; put it in the model's generation_config",
    ),
    "non_blocking_data_copy": Field(
        bool, False, MAPPED, "accelerator_config={'non_blocking': True}"
    ),
    "profiling_warmup_steps": Field(int, 0, WARNED, _PROFILE),
    "profiling_steps": Field(int, 0, WARNED, _PROFILE),
    "profiling_warmup_steps_eval": Field(int, 0, WARNED, _PROFILE),
    "profiling_steps_eval": Field(int, 0, WARNED, _PROFILE),
    "profiling_record_shapes": Field(bool, True, WARNED, _PROFILE),
    "profiling_with_stack": Field(bool, False, WARNED, _PROFILE),
    "optim": Field(
        str,
        "adamw_torch",
        MAPPED,
        "TrainingArguments.optim, Optimum Habana's "
        "default kept (use_fused_adam picks the fused AdamW on Gaudi)",
    ),
    "adam_epsilon": Field(
        float,
        1e-6,
        MAPPED,
        "TrainingArguments.adam_epsilon, Optimum Habana's default (1e-6, FusedAdamW's) kept",
    ),
    "logging_nan_inf_filter": Field(
        bool,
        False,
        MAPPED,
        "TrainingArguments field, Optimum Habana's default kept (False: no device sync per step)",
    ),
    "ddp_bucket_cap_mb": Field(
        int | None, 230, MAPPED, "TrainingArguments field, Optimum Habana's default (230) kept"
    ),
    "ddp_find_unused_parameters": Field(
        bool | None, False, MAPPED, "TrainingArguments field, Optimum Habana's default (False) kept"
    ),
    "half_precision_backend": Field(
        str,
        "hpu_amp",
        MAPPED,
        "hpu_amp / cpu_amp: bf16 autocast on the device, through accelerate (bf16=True)",
    ),
    "attn_implementation": Field(
        str,
        "eager",
        WARNED,
        "set on the model, as transformers 5 "
        "does: from_pretrained(..., attn_implementation='sdpa'); "
        "gaudi_fused_sdpa is Optimum Habana's kernel: use 'sdpa'",
    ),
    "flash_attention_recompute": Field(bool, False, WARNED, _FLASH),
    "flash_attention_fast_softmax": Field(bool, False, WARNED, _FLASH),
    "flash_attention_causal_mask": Field(bool, False, WARNED, _FLASH),
    "flash_attention_fp8": Field(
        bool,
        False,
        REFUSED,
        "FP8 attention of Optimum Habana's patched models; not supported: train in bf16",
    ),
    "sdp_on_bf16": Field(
        bool,
        False,
        MAPPED,
        "torch's math SDPA allowed bf16 reductions "
        "(torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp)",
    ),
    "fp8": Field(
        bool,
        False,
        REFUSED,
        "FP8 training through Intel's Transformer Engine in "
        "Optimum Habana; not supported: train in bf16",
    ),
}

# transformers 4.55 fields that Optimum Habana's example scripts pass and transformers 5 dropped
REMOVED = {
    "overwrite_output_dir": Field(
        bool,
        False,
        WARNED,
        "dropped by transformers 5: the Trainer writes into output_dir as it is",
    )
}

# The fields of gaudi_config.json (GaudiConfig), from gaudi_configuration.py
CONFIG_FIELDS: dict[str, Field] = {
    "use_torch_autocast": Field(
        bool, False, MAPPED, "bf16=True (autocast), unless the arguments say bf16 themselves"
    ),
    "autocast_bf16_ops": Field(
        list | None,
        None,
        MAPPED,
        "on Gaudi, the bridge's autocast list "
        "(PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST), before the bridge "
        "loads; warned elsewhere (torch.autocast has fixed lists)",
    ),
    "autocast_fp32_ops": Field(
        list | None, None, MAPPED, "the same, PT_HPU_AUTOCAST_FP32_OPS_LIST"
    ),
    "use_dynamic_shapes": Field(
        bool,
        False,
        WARNED,
        "shapes are the collator's: wb.bucket_collator pads to a few static lengths",
    ),
    "use_fused_adam": Field(
        bool,
        False,
        MAPPED,
        "the backend's fused AdamW over the Trainer's decay groups (hpex FusedAdamW on Gaudi)",
    ),
    "use_fused_clip_norm": Field(
        bool,
        False,
        MAPPED,
        "the Trainer's own clipping (max_grad_norm):"
        " it computes the norm at every step anyway, to log it; a fused "
        "clip on top would compute it twice",
    ),
}


# --------------------------------------------------------------------------- GaudiConfig
# keys Optimum Habana's BaseConfig writes into every gaudi_config.json it saves: read, kept,
# and used for nothing (optimum/configuration_utils.py: to_dict adds the library versions)
VERSION_KEYS = ("optimum_version", "transformers_version")


class GaudiConfig:
    """Optimum Habana's ``gaudi_config.json``: mixed precision and fused ops for a model.

    ``GaudiConfig.from_pretrained(path)`` reads a file or a directory holding one, or a hub
    name already in the local Hugging Face cache; keywords set fields directly. Unknown
    fields are refused with the known ones.
    """

    def __init__(self, **kwargs):
        unknown = sorted(set(kwargs) - set(CONFIG_FIELDS) - set(VERSION_KEYS))
        if unknown:
            raise ValueError(
                f"unknown GaudiConfig field(s) {', '.join(unknown)}; known: "
                f"{', '.join(CONFIG_FIELDS)}"
            )
        for name, f in CONFIG_FIELDS.items():
            setattr(self, name, kwargs.get(name, f.default))
        self.versions = {k: kwargs[k] for k in VERSION_KEYS if k in kwargs}

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | os.PathLike | None,
        *,
        cache_dir: str | os.PathLike | None = None,
        revision: str | None = None,
        token: str | bool | None = None,
        force_download: bool = False,
        local_files_only: bool = False,
        subfolder: str = "",
        **fields,
    ) -> GaudiConfig:
        """Read ``gaudi_config.json``: a file, a directory that holds one, or a hub name
        (``Habana/bert-base-uncased``) whose file is in the local Hugging Face cache
        (``cache_dir``, ``revision``, ``token`` as for the hub; nothing is downloaded at run
        time). ``fields`` override the file's, as in Optimum Habana."""
        if name_or_path is None:
            raise ValueError(
                "gaudi_config_name is not set: pass --gaudi_config_name PATH (a "
                f"{GAUDI_CONFIG_NAME} or the folder holding it)"
            )
        path = Path(name_or_path) / subfolder if subfolder else Path(name_or_path)
        if path.is_dir():
            path = path / GAUDI_CONFIG_NAME
        if not path.is_file():
            path = _cached(str(name_or_path), subfolder, cache_dir, revision, token)
        if force_download:
            warnings.warn(
                f"force_download=True: the workbench downloads nothing at run time; reading {path}",
                UserWarning,
                stacklevel=_caller(),
            )
        return cls(**{**json.loads(path.read_text()), **fields})

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in CONFIG_FIELDS}

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        # as Optimum Habana writes it: the fields and the versions that wrote them
        versions = {"transformers_version": transformers.__version__}
        text = json.dumps({**self.to_dict(), **versions}, indent=2) + "\n"
        (Path(directory) / GAUDI_CONFIG_NAME).write_text(text)

    def declare_autocast_bf16_fp32_ops(self) -> None:
        """Hand the op lists to the bridge's autocast (before it loads), as Optimum Habana did."""
        if self.autocast_bf16_ops is None or self.autocast_fp32_ops is None:
            return
        if settings.is_set("PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST"):
            return  # the user's own lists win
        if "habana_frameworks.torch.core" in sys.modules:
            # Optimum Habana sets the variables all the same, where they change nothing: say so,
            # and train with the bridge's default lists
            warnings.warn(
                "autocast_bf16_ops / autocast_fp32_ops are not applied: the Habana bridge "
                "loaded before them (in eager mode `import torch` loads it), and it reads the "
                "lists as it loads, so its default lists apply. To use these, start Python with "
                "PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST and PT_HPU_AUTOCAST_FP32_OPS_LIST set "
                "to files of op names, or with PT_HPU_LAZY_MODE=1 (then torch does not load it)",
                UserWarning,
                stacklevel=5,
            )
            return
        folder = Path(tempfile.mkdtemp(prefix="workbench-autocast-"))
        for env, ops, name in (
            ("PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST", self.autocast_bf16_ops, "lower_list.txt"),
            ("PT_HPU_AUTOCAST_FP32_OPS_LIST", self.autocast_fp32_ops, "fp32_list.txt"),
        ):
            (folder / name).write_text("".join(op + "\n" for op in ops))
            os.environ[env] = str(folder / name)

    def __repr__(self) -> str:
        return f"GaudiConfig({self.to_dict()})"


def _cached(name: str, subfolder: str, cache_dir, revision, token) -> Path:
    """A hub name's gaudi_config.json from the local Hugging Face cache, or the error that
    says how to get it there (or to pass a path)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HFValidationError

    try:
        return Path(
            hf_hub_download(
                name,
                GAUDI_CONFIG_NAME,
                subfolder=subfolder or None,
                cache_dir=cache_dir,
                revision=revision,
                token=token,
                local_files_only=True,  # no network at run time
            )
        )
    except (OSError, ValueError, HFValidationError):  # not cached, or not a hub name
        pass
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name) or name.startswith("."):
        raise FileNotFoundError(
            f"gaudi_config_name={name!r}: no such {GAUDI_CONFIG_NAME} or folder holding one; "
            f"pass the path of a {GAUDI_CONFIG_NAME} or its folder"
        )
    where = f", cache_dir={str(cache_dir)!r}" if cache_dir else ""
    raise FileNotFoundError(
        f"gaudi_config_name={name!r}: not a file or folder here, and the "
        f"{GAUDI_CONFIG_NAME} of {name!r} is not in the local Hugging Face cache. The "
        f"workbench reads no hub at run time: download it once "
        f"(huggingface_hub.hf_hub_download({name!r}, {GAUDI_CONFIG_NAME!r}{where})) or "
        f"pass the path of a {GAUDI_CONFIG_NAME} or its folder"
    )


# --------------------------------------------------------------------------- the arguments
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
        warnings.warn(
            f"{name}={value!r} is ignored on transformers 5: {f.what}",
            UserWarning,
            stacklevel=_caller(),
        )
    if args.distribution_strategy not in ("ddp", "fast_ddp"):
        raise ValueError(f"distribution_strategy={args.distribution_strategy!r}: pass 'ddp'")
    if args.distribution_strategy == "fast_ddp":
        warnings.warn(
            "distribution_strategy='fast_ddp' runs as 'ddp': Optimum Habana's own "
            "all-reduce has no transformers 5 hook",
            UserWarning,
            stacklevel=_caller(),
        )
    if args.half_precision_backend not in ("hpu_amp", "cpu_amp"):
        raise ValueError(
            f"half_precision_backend={args.half_precision_backend!r}: pass 'hpu_amp' or 'cpu_amp'"
        )
    if args.gaudi_config_name is not None and not args.use_habana:
        raise ValueError("gaudi_config_name needs use_habana=True (as in Optimum Habana)")


def _prepare(self) -> None:
    """Check Optimum Habana's fields and apply those that must come before the device is set."""
    _check(self)
    self.gaudi_config = None
    if self.gaudi_config_name is not None:
        self.gaudi_config = GaudiConfig.from_pretrained(self.gaudi_config_name)
    config = self.gaudi_config
    if config is not None and config.use_torch_autocast and not self.bf16 and not self.deepspeed:
        self.bf16 = True  # Optimum Habana: use_torch_autocast turns bf16 autocast on
    self.workbench_device = None
    if self.use_habana and not self.use_cpu:
        want = "lazy" if self.use_lazy_mode else "eager"
        before = settings.get("PT_HPU_LAZY_MODE")
        if bridge_installed():
            # the op lists and the mode go before the device probe below, which loads the
            # bridge: it reads both once, as it loads
            if self.gaudi_config is not None:
                self.gaudi_config.declare_autocast_bf16_fp32_ops()
            if not bridge_loaded():
                set_hpu_mode(want)
        dev = pick_device()
        if dev.kind == "hpu" and hpu_mode() != want:
            # Loaded already (current bridges load at `import torch` unless PT_HPU_LAZY_MODE=1):
            # Optimum Habana then runs in the bridge's mode (use_lazy_mode only decides its
            # mark_step calls, which are no-ops in eager mode); the same here, said aloud
            warnings.warn(
                f"use_lazy_mode={self.use_lazy_mode}: the Habana bridge is already loaded in "
                f"{hpu_mode()} mode (fixed per process; `import torch` loads it unless "
                f"PT_HPU_LAZY_MODE=1), so this trains in {hpu_mode()} mode. For {want} mode, "
                f"start Python with PT_HPU_LAZY_MODE={int(want == 'lazy')}",
                UserWarning,
                stacklevel=4,
            )
        if dev.kind != "hpu":
            if before is None:  # the mode asked for is not this run's (no Gaudi here)
                os.environ.pop("PT_HPU_LAZY_MODE", None)
            # a notice, not an error: the same script runs on the GPU or CPU (on stdout: a
            # notebook shows stderr as a pink error box)
            print(
                f"use_habana=True but this machine has no Gaudi: training on {dev.kind}", flush=True
            )
            self.use_cpu = dev.kind == "cpu"  # transformers 5 runs bf16 on a CPU only if asked
        compile_backend = dev.backend.policy.compile_backend
        if self.torch_compile and not self.torch_compile_backend and compile_backend:
            self.torch_compile_backend = compile_backend
        self.workbench_device = dev.kind
    if self.non_blocking_data_copy:
        config = (
            dict(self.accelerator_config or {}) if isinstance(self.accelerator_config, dict) else {}
        )
        self.accelerator_config = {**config, "non_blocking": True}


def _arguments_class(name: str, base: type) -> type:
    fields = [
        (n, f.type, dataclasses.field(default=f.default)) for n, f in {**FIELDS, **REMOVED}.items()
    ]

    def __post_init__(self):
        _prepare(self)
        base.__post_init__(self)  # then the transformers class's own

    cls = dataclasses.make_dataclass(
        name, fields, bases=(base,), namespace={"__post_init__": __post_init__}
    )
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
def _dynamo(args) -> None:
    """The torch._dynamo settings the arguments name."""
    names = ("cache_size_limit", "inline_inbuilt_nn_modules", "allow_unspec_int_on_nn_module")
    if all(getattr(args, n) is None for n in names):
        return
    import torch._dynamo

    config = torch._dynamo.config
    if args.cache_size_limit is not None:
        # torch 2.7 renamed cache_size_limit to recompile_limit (the old name is an alias)
        name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
        setattr(config, name, args.cache_size_limit)
    for n in names[1:]:
        if getattr(args, n) is not None:
            setattr(config, n, getattr(args, n))


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
    config = gaudi_config or args.gaudi_config or GaudiConfig()
    if config.use_torch_autocast and not args.bf16 and not args.deepspeed:
        args.bf16 = True  # Optimum Habana: use_torch_autocast enables bf16 autocast
    if (config.autocast_bf16_ops or config.autocast_fp32_ops) and args.workbench_device != "hpu":
        warnings.warn(
            "autocast_bf16_ops / autocast_fp32_ops are the HPU bridge's lists; "
            "torch.autocast elsewhere uses its own",
            UserWarning,
            stacklevel=_caller(),
        )
    if args.sdp_on_bf16:
        import torch

        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
    _dynamo(args)
    trainer.gaudi_config = config
    # the fused AdamW, over the Trainer's own decay groups, through create_optimizer below
    # (Seq2SeqTrainer's constructor has no optimizer_cls_and_kwargs)
    trainer._gaudi_optimizer = optimizer_cls_and_kwargs
    given = optimizers is not None and optimizers[0] is not None
    if config.use_fused_adam and args.use_habana and not given and not optimizer_cls_and_kwargs:
        trainer._gaudi_optimizer = fused_optimizer(pick_device(args.device.type), args)
    callbacks = list(callbacks or [])
    if not any(isinstance(c, Attachment) for c in callbacks):  # one run, however named
        callbacks.append(callback(throughput_warmup_steps=args.throughput_warmup_steps or None))
    return args, callbacks


class GaudiTrainer(transformers.Trainer):
    """Optimum Habana's ``GaudiTrainer``: a ``transformers.Trainer`` with the Gaudi config
    applied and the workbench attached (``wb.callback()``: the run directory, the live view,
    Stop), unless ``callbacks`` has one already. Optimum Habana 1.21's argument order
    (``model, gaudi_config, args, data_collator, ...``); every other keyword is the
    Trainer's, ``tokenizer`` is ``processing_class`` in transformers 5. A subclass as in
    Optimum Habana's examples (``class QuestionAnsweringTrainer(GaudiTrainer)``) works as
    there. With ``use_fused_adam`` on Gaudi the Trainer builds the hpex FusedAdamW over its
    own decay groups (``create_optimizer``); ``save_model`` writes ``gaudi_config.json``
    next to the model, in every checkpoint too, as Optimum Habana does."""

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
        _quiet(self)  # the dashboard shows what PrinterCallback would print as dicts

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
            self.gaudi_config.save_pretrained(output_dir or self.args.output_dir)


class GaudiSeq2SeqTrainer(GaudiTrainer, transformers.Seq2SeqTrainer):
    """``GaudiTrainer`` for sequence-to-sequence models: also a
    ``transformers.Seq2SeqTrainer`` (generation in evaluation and prediction), in Optimum
    Habana's argument order (which has no ``optimizer_cls_and_kwargs``)."""

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
    """``optimum.habana.transformers.modeling_utils.adapt_transformers_to_gaudi``: nothing
    to do on transformers 5. Optimum Habana replaced transformers 4.55's model code with its
    own Gaudi versions; transformers 5's models run on Gaudi as they are (SDPA attention,
    bf16 autocast), so the call stays in a migrated script and changes nothing."""


def check_optimum_habana_min_version(min_version: str) -> None:
    """``optimum.habana.utils.check_optimum_habana_min_version``: passes. The workbench
    carries 1.21's training API; transformers' own ``check_min_version`` still checks
    transformers."""


def warn0(message, *args, **kwargs) -> None:
    """``optimum.habana.utils.warn0``: ``warnings.warn`` on the main process only (rank 0
    of torchrun's world), pointing at the caller's line."""
    if world()[0] == 0:
        kwargs.setdefault("stacklevel", 2)
        warnings.warn(message, *args, **kwargs)


def _caller() -> int:
    """The ``stacklevel`` that points a warning at the user's line: the first frame outside
    this package, dataclasses' generated code and transformers (an argument class's
    ``__post_init__`` runs inside both)."""
    import inspect

    inner = (str(Path(__file__).resolve().parents[1]), str(Path(transformers.__file__).parent))
    frame, level = inspect.currentframe().f_back, 1
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(inner) or name.startswith("<") or name == dataclasses.__file__):
            return level
        frame, level = frame.f_back, level + 1
    return 1


def table() -> list[dict[str, str]]:
    """Every field, its Optimum Habana default and what it becomes (the docs table)."""
    rows = [
        {"field": n, "default": repr(f.default), "how": f.how, "what": f.what, "of": "args"}
        for n, f in {**FIELDS, **REMOVED}.items()
    ]
    rows += [
        {
            "field": n,
            "default": repr(f.default),
            "how": f.how,
            "what": f.what,
            "of": GAUDI_CONFIG_NAME,
        }
        for n, f in CONFIG_FIELDS.items()
    ]
    return rows
