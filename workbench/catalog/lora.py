"""LoRA options: ``wb.model``'s ``lora=`` checked, and a model wrapped with peft's adapters."""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import math
import numbers
import warnings
from typing import Any

# wb.model's LoRA options (wrap_model and the text-to-image UNet's add_lora read them); any other
# peft.LoraConfig field passes through as it is
OPTIONS = ("r", "alpha", "dropout", "target_modules")
PEFT_TASKS = {"causal_lm": "CAUSAL_LM", "classification": "SEQ_CLS", "seq2seq": "SEQ_2_SEQ_LM"}


def check_options(lora) -> dict[str, Any]:
    """``lora=`` (True or a dict) as the spec keeps it, each option checked before anything
    is built: peft refuses r=0 only when the run has started."""
    if lora is True:
        return {}
    if not isinstance(lora, dict):
        raise TypeError(
            f"lora must be True or a dict of LoRA options ({', '.join(OPTIONS)}), got "
            f"{lora!r}: e.g. lora={{'r': 8, 'alpha': 16}}"
        )
    number = {k: isinstance(v, numbers.Real) and not isinstance(v, bool) for k, v in lora.items()}
    if "r" in lora and not (
        isinstance(lora["r"], numbers.Integral) and number["r"] and int(lora["r"]) >= 1
    ):
        raise ValueError(
            f"lora's r must be a whole number, at least 1 (the adapters' rank), got "
            f"{lora['r']!r}: pass e.g. lora={{'r': 8}}"
        )
    if "alpha" in lora and not (number["alpha"] and 0 < lora["alpha"] < math.inf):
        raise ValueError(
            f"lora's alpha must be a number above 0 (the adapters' scale is alpha / r), got "
            f"{lora['alpha']!r}: pass e.g. lora={{'r': 8, 'alpha': 16}}"
        )
    if "dropout" in lora and not (number["dropout"] and 0 <= lora["dropout"] < 1):
        raise ValueError(
            f"lora's dropout must be a fraction from 0 up to (not including) 1, got "
            f"{lora['dropout']!r}: pass e.g. lora={{'dropout': 0.05}}"
        )
    unknown = sorted(set(lora) - set(OPTIONS))
    if unknown and importlib.util.find_spec("peft") is not None:  # without peft: it says so
        import peft

        # the fields wrap_model sets from the options above (or the task) are not options
        fields = {f.name for f in dataclasses.fields(peft.LoraConfig) if f.init}
        fields -= {"task_type", "peft_type", "lora_alpha", "lora_dropout"}
        bad = [k for k in unknown if k not in fields]
        if bad:
            near = {k: difflib.get_close_matches(k, [*OPTIONS, *fields], 1) for k in bad}
            hints = [
                f"{k!r}" + (f" (did you mean {near[k][0]!r}?)" if near[k] else "") for k in bad
            ]
            raise ValueError(
                f"unknown LoRA option{'s' * (len(bad) > 1)} {', '.join(hints)}; known: "
                f"{', '.join(OPTIONS)}, and peft.LoraConfig's other fields (bias, "
                f"use_rslora, use_dora, modules_to_save, ...)"
            )
    return dict(lora)


def wrap_model(model, lora: dict | None, task: str, name: str):
    """``model`` (the ``name`` model for ``task``) with LoRA adapters (peft) as ``lora`` says."""
    try:
        import peft
    except ImportError:
        raise ImportError("LoRA needs peft: pip install 'gaudi-workbench[lora]'") from None
    cfg = dict(lora or {})
    # peft's own errors name its internals: say which lora= option, and what would do
    try:
        config = peft.LoraConfig(
            task_type=getattr(peft.TaskType, PEFT_TASKS[task]),
            r=cfg.pop("r", 8),
            lora_alpha=cfg.pop("alpha", 16),
            lora_dropout=cfg.pop("dropout", 0.05),
            target_modules=cfg.pop("target_modules", None),
            **cfg,
        )
        # peft reads transformers' deprecated name; nothing for you to change
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", r"`is_gradient_checkpointing` is deprecated", FutureWarning
            )
            return peft.get_peft_model(model, config)
    except (ValueError, TypeError, NotImplementedError) as e:
        raise ValueError(_error(model, lora, name, e)) from None


def _error(model, lora: dict | None, name: str, error: Exception) -> str:
    """One message for a ``lora=`` that peft refuses: the option, peft's reason, the fix."""
    if "target modules" in str(error).lower() or "target_modules" in str(error):
        import torch

        names = sorted(
            {
                n.rsplit(".", 1)[-1]
                for n, m in model.named_modules()
                if isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D"
            }
        )
        return (
            f"lora: target_modules {(lora or {}).get('target_modules')!r} match no layer "
            f"of {name}; its linear layers: {', '.join(names)} (e.g. "
            f"lora={{'r': 8, 'target_modules': {names[:2]!r}}})"
        )
    return (
        f"lora: {lora!r} is not a LoRA configuration peft takes ({error}): fix that "
        "option, or leave it out (r, alpha, dropout, target_modules and peft.LoraConfig's "
        "fields)"
    )
