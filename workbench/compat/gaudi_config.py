"""Optimum Habana 1.21's configuration, as the workbench reads it: every field it added to
``TrainingArguments`` (``FIELDS``; ``REMOVED``: transformers 4.55's fields its scripts still use;
``CHANGED``: transformers 5 fields kept at the scripts' value) and to ``gaudi_config.json``
(``CONFIG_FIELDS``), each with what the workbench makes of it; ``table()`` is the docs' table.

Facts from huggingface/optimum-habana at 1d8504c6c (version 1.21.0.dev0):
optimum/habana/transformers/training_args.py and gaudi_configuration.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import transformers

from .. import settings
from .callers import notice

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

# transformers 4.55 fields that Optimum Habana's example scripts pass (README commands) or
# read (training_args.X), and transformers 5 dropped; at their 4.55 defaults. Found in
# huggingface/optimum-habana@1d8504c6c:examples/**/README.md and examples/**/*.py
REMOVED = {
    "overwrite_output_dir": Field(
        bool,
        False,
        WARNED,
        "dropped by transformers 5: the Trainer writes into output_dir as it is",
    ),
    # passed by the language-modeling, audio-classification and trl READMEs;
    # transformers@5.24.0:src/transformers/training_args.py: warmup_steps is a float, a
    # ratio of the training steps below 1 (get_warmup_steps)
    "warmup_ratio": Field(
        float,
        0.0,
        MAPPED,
        "warmup_steps=<the ratio>: transformers 5's warmup_steps below 1 is a ratio of the "
        "training steps",
    ),
    # read by examples/question-answering/trainer_qa.py and trainer_seq2seq_qa.py to choose
    # self.prediction_loop, which transformers 5's Trainer no longer has
    "use_legacy_prediction_loop": Field(
        bool,
        False,
        WARNED,
        "transformers 5's Trainer has only evaluation_loop: it is used (the field is set "
        "back to False)",
    ),
    # set to False by examples/language-modeling/run_multitask_prompt_tuning.py
    "save_safetensors": Field(
        bool,
        True,
        WARNED,
        "transformers 5 always saves safetensors",
    ),
    # read by examples/contrastive-image-text/habana_dataloader_trainer.py and trl/sft.py
    "group_by_length": Field(
        bool,
        False,
        MAPPED,
        "train_sampling_strategy='group_by_length', transformers 5's name for it",
    ),
    # passed by examples/image-classification/README.md's push-to-hub command
    "push_to_hub_model_id": Field(
        str | None, None, MAPPED, "hub_model_id, transformers 5's name for it"
    ),
}

# transformers 5 fields whose default changes what Optimum Habana's scripts did: kept at the
# scripts' value. use_cache was the scripts' ModelArguments field (default True; run_clm.py and
# 7 more); transformers 5's TrainingArguments.use_cache (default False) is written into
# model.config.use_cache (transformers@5.24.0 trainer.py, "Finalize")
CHANGED = {
    "use_cache": Field(
        bool,
        True,
        MAPPED,
        "model.config.use_cache, as the scripts' own field was: True (Optimum Habana's "
        "scripts' default, not transformers 5's False), False under gradient_checkpointing",
    ),
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
    """Optimum Habana's ``gaudi_config.json``: mixed precision and fused ops for a model;
    keywords set fields directly, unknown fields are refused with the known ones."""

    # the fields read by name (__init__ sets every one of CONFIG_FIELDS)
    use_torch_autocast: bool
    autocast_bf16_ops: list | None
    autocast_fp32_ops: list | None
    use_fused_adam: bool

    def __init__(self, **kwargs):
        unknown = sorted(set(kwargs) - set(CONFIG_FIELDS) - set(VERSION_KEYS))
        if unknown:
            raise ValueError(
                f"unknown GaudiConfig field(s) {', '.join(unknown)}; known: "
                f"{', '.join(CONFIG_FIELDS)}"
            )
        for name, value in kwargs.items():
            if name in CONFIG_FIELDS:
                _check_type(name, value, "GaudiConfig")
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
        """Read ``gaudi_config.json``: a file, a directory holding one, or a hub name whose file
        is in the local Hugging Face cache (nothing is downloaded). ``fields`` override the
        file's, as in Optimum Habana."""
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
            notice(
                f"force_download=True: the workbench downloads nothing at run time; reading {path}"
            )
        return cls(**{**_read(path), **fields})

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
            notice(
                "autocast_bf16_ops / autocast_fp32_ops are not applied: the Habana bridge "
                "loaded before them (in eager mode `import torch` loads it), and it reads the "
                "lists as it loads, so its default lists apply. To use these, start Python with "
                "PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST and PT_HPU_AUTOCAST_FP32_OPS_LIST set "
                "to files of op names, or with PT_HPU_LAZY_MODE=1 (then torch does not load it)"
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


def _read(path: Path) -> dict[str, Any]:
    """A gaudi_config.json's fields, each of its type; else one error naming the file and
    what is wrong with it."""
    text = path.read_text()
    if not text.strip():
        raise ValueError(
            f"{str(path)!r} is empty: a {GAUDI_CONFIG_NAME} is a JSON object of GaudiConfig "
            f'fields, e.g. {{"use_fused_adam": true, "use_torch_autocast": true}}'
        )
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(
            f"{str(path)!r} is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}; "
            f"cut short?): write it again as a JSON object of GaudiConfig fields"
        ) from None
    if not isinstance(fields, dict):
        raise ValueError(
            f"{str(path)!r} holds a JSON {type(fields).__name__}, not an object: a "
            f"{GAUDI_CONFIG_NAME} is a JSON object of GaudiConfig fields, e.g. "
            f'{{"use_fused_adam": true, "use_torch_autocast": true}}'
        )
    for name, value in fields.items():
        if name in CONFIG_FIELDS:
            _check_type(name, value, repr(str(path)))
    return fields


def _check_type(name: str, value, where: str) -> None:
    """Refuse a GaudiConfig field of the wrong type: the string "false" would turn an option
    on, and "add,mul" would be written as the ops a, d, d, ",", ... (Optimum Habana's
    GaudiConfig takes both as they are)."""
    kind = CONFIG_FIELDS[name].type
    shown = json.dumps(value, default=repr)  # as the file spells it
    if kind is bool and not isinstance(value, bool):
        meant = {"true": "true", "1": "true", "false": "false", "0": "false"}
        raise ValueError(
            f'{where}: "{name}" is {shown}, not true or false: write "{name}": '
            f"{meant.get(str(value).strip().lower(), 'true (or false)')} (JSON's true/false, "
            f"without quotes)"
        )
    if kind == list | None and not (
        value is None or (isinstance(value, list) and all(isinstance(op, str) for op in value))
    ):
        ops = (
            [op.strip() for op in value.split(",") if op.strip()] if isinstance(value, str) else []
        )
        raise ValueError(
            f'{where}: "{name}" is {shown}, not a list of op names: write a JSON list, '
            f'"{name}": {json.dumps(ops or ["add", "mul"])}'
        )


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


def table() -> list[dict[str, str]]:
    """Every field, its Optimum Habana default and what it becomes (the docs table)."""
    rows = [
        {"field": n, "default": repr(f.default), "how": f.how, "what": f.what, "of": "args"}
        for n, f in {**FIELDS, **REMOVED, **CHANGED}.items()
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
