"""A run's arguments: every name ``wb.train`` takes, its default and its check, stated once.

``RunArgs`` is the frozen, typed record every door (``spelled_out``), the pickers and the
train form share (``FIELDS``). A name TrainingArguments spells differently (``learning_rate``
for ``lr``) is an alias, checked as the field is. Checks that need the model, the data or the
device live in ``recipe``.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from .backends.hpu import MODES
from .backends.registry import PRECISIONS
from .shapes.batching import PACKINGS

# The one padding vocabulary: wb.train's ``padding=``, the shape statistics and the pickers.
PADDINGS = ("auto", "longest", "max_length", "bucketed", "packed")

Check = Callable[[str, Any], None]  # check(name, value) raises with the fix
Door = TypeVar("Door", bound=Callable)  # wb.train and its kin, their type kept


def _optional(check):
    """``check``, letting None (the field's "not given") through."""
    return lambda name, value: None if value is None else check(name, value)


def _positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")


def _int_at_least_0(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} must be a whole number, 0 or more, got {value!r}")


def _epochs(name: str, value) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not float(value) > 0
        or math.isinf(value)
    ):
        raise ValueError(f"{name} must be a number of epochs above 0, got {value!r}")


def _lr(name: str, value) -> None:
    if not (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and float(value) > 0
        and math.isfinite(value)
    ):  # nor NaN
        raise ValueError(
            f"{name}={value!r} is not a learning rate: it must be a number above 0 "
            f"(typical: 1e-3 for a model trained from scratch, 5e-5 to fine-tune)"
        )


def _one_of(*known):
    def check(name: str, value) -> None:
        if value not in known:
            raise ValueError(f"unknown {name} {value!r}; known: {', '.join(map(str, known))}")

    return check


def _bool(name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")


def _run_name(name: str, value) -> None:
    if not isinstance(value, str):
        raise TypeError(
            f"{name} must be text (the run directory's name), got {value!r}: pass {name}='my-run', "
            f"or leave it out for <model>-<data>"
        )
    if not value.strip():
        raise ValueError(
            f"{name}={value!r} is blank: a run directory needs a name. Pass {name}='my-run', "
            f"or leave it out for <model>-<data>"
        )


def _anything(name: str, value) -> None:
    return None


@dataclass(frozen=True)
class Field:
    """One argument of a run as the doors see it: its default, its check, the TrainingArguments
    names that mean the same, and its type (as the source spells it), read from ``RunArgs``."""

    default: Any
    check: Check = _anything  # check(name, value) raises with the fix; None is the default's
    aliases: tuple[str, ...] = ()
    annotation: Any = Any


def _arg(default: Any, check: Check = _anything, aliases: tuple[str, ...] = ()) -> Any:
    """A field of ``RunArgs``: its default, its check and its TrainingArguments aliases."""
    return field(default=default, metadata={"check": check, "aliases": aliases})


def _resolved() -> Any:
    """A field of ``RunArgs`` that the run works out when it is prepared (no caller sets it)."""
    return field(default=None, metadata={"resolved": True})


@dataclass(frozen=True, kw_only=True)
class RunArgs:
    """The arguments of one run, in ``wb.train``'s order: each one's name, type, default and
    check written once, here; the TrainingArguments overrides beside them. ``from_options``
    checks a user's keywords; ``to_dict`` / ``from_dict`` round-trip spec.json's ``"args"``;
    frozen: ``replace(...)`` makes a checked copy.
    """

    max_steps: int | None = _arg(None, _optional(_positive_int))
    epochs: float | None = _arg(None, _optional(_epochs), ("num_train_epochs",))
    batch_size: int = _arg(16, _positive_int, ("per_device_train_batch_size",))
    lr: float | None = _arg(None, _optional(_lr), ("learning_rate",))
    precision: str = _arg("auto", _one_of(*PRECISIONS))  # the device table's
    device: str = _arg("auto")  # checked by the device table (names the known ones)
    eval_every: int | None = _arg(None, _optional(_positive_int), ("eval_steps",))
    save_every: int | None = _arg(None, _optional(_positive_int), ("save_steps",))
    log_every: int | None = _arg(None, _optional(_positive_int), ("logging_steps",))
    run_dir: str | Path | None = _arg(None)  # checked where it is made
    name: str | None = _arg(None, _optional(_run_name))
    max_length: int = _arg(128, _positive_int)
    padding: str = _arg("auto", _one_of(*PADDINGS))
    buckets: int = _arg(8, _positive_int)
    packing: str = _arg("concat", _one_of(*PACKINGS))
    seed: int = _arg(0, _int_at_least_0)
    compile: bool | None = _arg(None, _optional(_bool))
    mode: str | None = _arg(None, _optional(_one_of(*MODES)))
    throughput_warmup_steps: int | None = _arg(None, _optional(_int_at_least_0))
    report_to: str | list | None = _arg(None)
    sample_prompts: list | None = _arg(None)  # checked with the model's task
    sample_every: int | None = _arg(None)
    sample_steps: int = _arg(10)
    cache_latents: bool = _arg(False, _bool)
    # worked out when the run is prepared (recipe.cadence): seconds at least between events
    log_interval_s: float | None = _resolved()
    trainer_overrides: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> RunArgs:
        """Split ``options`` into the run's fields and TrainingArguments overrides; an alias
        becomes its field; every value is checked; the defaults fill the rest."""
        values, overrides = {}, {}
        for key, value in options.items():
            if key in FIELDS:
                values[key] = value
            elif key in ALIASES:
                canonical = ALIASES[key]
                if canonical in options:
                    raise ValueError(
                        f"{key}= and {canonical}= name the same argument; pass only "
                        f"{canonical}={options[canonical]!r}"
                    )
                values[canonical] = value
            else:
                overrides[key] = value
        for key, value in values.items():
            FIELDS[key].check(key if key in options else _alias_used(key, options), value)
        full = {name: values.get(name, f.default) for name, f in FIELDS.items()}
        return cls(**full, trainer_overrides=overrides)

    @property
    def values(self) -> dict[str, Any]:
        """The run's arguments by name (every field but the TrainingArguments overrides)."""
        return {
            f.name: getattr(self, f.name) for f in fields(self) if f.name != "trainer_overrides"
        }

    def to_dict(self) -> dict[str, Any]:
        out = {**self.values, "trainer_overrides": dict(self.trainer_overrides)}
        if out["log_interval_s"] is None:  # resolved when prepared: absent until then
            del out["log_interval_s"]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunArgs:
        """The record of a dict ``to_dict`` wrote: absent fields take their defaults, names
        no field has are left out (a run's files are data: ``rundir.spec`` checks them)."""
        known = {f.name for f in fields(cls)} - {"trainer_overrides"}
        overrides = dict(d.get("trainer_overrides") or {})
        return cls(**{k: v for k, v in d.items() if k in known}, trainer_overrides=overrides)

    def replace(self, **changes: Any) -> RunArgs:
        """A copy with ``changes`` (fields), each checked."""
        for key, value in changes.items():
            if key in FIELDS:
                FIELDS[key].check(key, value)
        return dataclasses.replace(self, **changes)

    def __repr__(self) -> str:
        changed = {
            k: v
            for k, v in self.values.items()
            if (v != FIELDS[k].default if k in FIELDS else v is not None)
        }
        parts = [f"{k}={v!r}" for k, v in {**changed, **self.trainer_overrides}.items()]
        return f"RunArgs({', '.join(parts)})"


# The arguments a caller gives, in wb.train's order, read from RunArgs' fields: the doors'
# keywords and the forms' defaults. (Monkeypatching an entry changes what the doors fill in.)
FIELDS: dict[str, Field] = {
    f.name: Field(f.default, f.metadata["check"], f.metadata["aliases"], f.type)
    for f in fields(RunArgs)
    if "check" in f.metadata
}
ALIASES = {alias: name for name, f in FIELDS.items() for alias in f.aliases}


def default(name: str) -> Any:
    """The default of argument ``name`` (read when asked: the pickers and the form call it)."""
    return FIELDS[name].default


def check_live(live: Any) -> None:
    """Refuse a ``live=`` no display reads: 'auto', True, False or a callable ``live(run)``
    (wb.train, launch, resume and attach take it; it is not a run argument)."""
    if not (callable(live) or live is True or live is False or live == "auto"):
        raise ValueError(f"live={live!r}: pass 'auto', True, False or a callable live(run)")


def check_value(name: str, value: Any) -> None:
    """Refuse a bad value of argument ``name`` (or of one of its aliases), with the fix."""
    canonical = ALIASES.get(name, name)
    FIELDS[canonical].check(name, value)


def _alias_used(field: str, options: dict[str, Any]) -> str:
    return next(a for a in FIELDS[field].aliases if a in options)


# TrainingArguments fields a run's spec.json may carry into ``resume()``: how the model trains.
# Every other field is the caller's to state at each call, never a run directory's (docs/runs.md):
# where results go (push_to_hub, hub_*, report_to, ...) and the files a run reads (deepspeed,
# fsdp_config, ...). An allow-list: a field a later transformers adds is refused until added.
RESUMABLE = frozenset(
    {
        "adam_beta1", "adam_beta2", "adam_epsilon", "weight_decay", "max_grad_norm",
        "optim", "optim_args", "optim_target_modules", "lr_scheduler_type",
        "lr_scheduler_kwargs", "warmup_steps", "gradient_accumulation_steps",
        "label_smoothing_factor", "neftune_noise_alpha", "gradient_checkpointing",
        "gradient_checkpointing_kwargs", "activation_checkpointing",
        "activation_checkpointing_kwargs", "bf16", "fp16", "tf32", "bf16_full_eval",
        "fp16_full_eval", "use_cpu", "seed", "data_seed", "full_determinism",
        "torch_compile", "torch_compile_backend", "torch_compile_mode",
        "per_device_train_batch_size", "per_device_eval_batch_size", "learning_rate",
        "max_steps", "num_train_epochs", "auto_find_batch_size", "train_sampling_strategy",
        "dataloader_drop_last", "dataloader_num_workers", "dataloader_pin_memory",
        "dataloader_persistent_workers", "dataloader_prefetch_factor", "dataloader_in_order",
        "remove_unused_columns", "label_names", "length_column_name", "ignore_data_skip",
        "eval_strategy", "eval_steps", "eval_delay", "eval_on_start",
        "eval_accumulation_steps", "eval_do_concat_batches", "eval_use_gather_object",
        "batch_eval_metrics", "prediction_loss_only", "include_for_metrics",
        "include_num_input_tokens_seen", "average_tokens_across_devices",
        "logging_strategy", "logging_steps", "logging_first_step", "logging_nan_inf_filter",
        "log_level", "log_level_replica", "log_on_each_node", "disable_tqdm",
        "skip_memory_metrics", "save_strategy", "save_steps", "save_total_limit",
        "save_only_model", "load_best_model_at_end", "metric_for_best_model",
        "greater_is_better", "restore_callback_states_from_checkpoint", "use_cache",
        "torch_empty_cache_steps", "ddp_backend", "ddp_timeout", "ddp_bucket_cap_mb",
        "ddp_find_unused_parameters", "ddp_broadcast_buffers", "ddp_static_graph",
        "do_train", "do_eval", "do_predict",
    }
)  # fmt: skip
# Fields refused from every caller: a run's outputs always land in the run, and a credential
# is never written into its spec.json. Each maps to the fix.
REFUSED = {
    "output_dir": "checkpoints always go to the run's own checkpoints/ folder; choose where "
    "runs go with run_dir= (wb.train), or copy a run's checkpoints after it ends",
    "hub_token": "a token passed here would be written into the run's spec.json: log in "
    "with `hf auth login` (or set HF_TOKEN) and leave hub_token out",
}


def check_refused(overrides: dict[str, Any]) -> None:
    """Refuse ``REFUSED`` fields among a call's TrainingArguments overrides, with the fix."""
    bad = [k for k in REFUSED if k in overrides]
    if bad:
        raise ValueError("; ".join(f"{k}= is not taken: {REFUSED[k]}" for k in bad))


def caller_only(args: RunArgs) -> dict[str, Any]:
    """What a run spec's arguments set that only a caller may: TrainingArguments overrides
    outside ``RESUMABLE`` and a ``report_to`` that reports anywhere."""
    held = {k: v for k, v in args.trainer_overrides.items() if k not in RESUMABLE}
    if args.report_to not in (None, "none", [], ["none"]):
        held["report_to"] = args.report_to
    return held


def check_overrides(overrides: dict[str, Any], new_run: bool = False) -> tuple[dict, dict]:
    """Check a new run's options (``new_run``) or a resume's overrides: run fields by their
    checks, every other name a TrainingArguments field; one error naming the bad ones, each
    with the nearest name. Returns (fields, TrainingArguments overrides)."""
    import dataclasses
    import difflib

    split = RunArgs.from_options(overrides)  # checks fields and aliases
    check_refused(split.trainer_overrides)
    fields: set[str] = set()
    if split.trainer_overrides:  # importing TrainingArguments takes seconds (peft, if installed)
        import transformers

        fields = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    bad = sorted(k for k in split.trainer_overrides if k not in fields)
    if bad:
        names = sorted(fields | set(FIELDS) | set(ALIASES))
        near = {k: difflib.get_close_matches(k, names, 1) for k in bad}
        if new_run:
            shown = {k: f"{k}={overrides[k]!r}" for k in bad}
            hints = [
                shown[k] + (f" (did you mean {near[k][0]}={overrides[k]!r}?)" if near[k] else "")
                for k in bad
            ]
            raise ValueError(
                f"unknown argument{'s' * (len(bad) > 1)} {', '.join(hints)}: a run takes "
                f"wb.train's arguments (batch_size, lr, max_steps, ...: help(wb.train)) and "
                f"transformers.TrainingArguments fields. Fix the spelling, or leave "
                f"{'them' if len(bad) > 1 else 'it'} out"
            )
        hints = [f"{k} (did you mean {near[k][0]}?)" if near[k] else k for k in bad]
        raise ValueError(
            f"not TrainingArguments fields: {', '.join(hints)}. resume() takes "
            f"max_steps and TrainingArguments fields; a new model or dataset needs "
            f"a new run (wb.train)"
        )
    given = {ALIASES.get(k, k) for k in overrides} & set(FIELDS)
    return {k: split.values[k] for k in given}, split.trainer_overrides


def spelled_out(*leave_out: str) -> Callable[[Door], Door]:
    """Decorate a door that takes the run's arguments as ``**options``: its signature (for
    ``help()``, ``inspect``, completion) spells out ``FIELDS`` but ``leave_out``, then
    ``**trainer_overrides``; type checkers read ``Unpack[RunOptions]`` (training/overrides.pyi)."""

    def decorate(func: Door) -> Door:
        sig = inspect.signature(func)
        own = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
        run = [
            inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                              annotation=f.annotation)
            for n, f in FIELDS.items()
            if n not in leave_out
        ]  # fmt: skip
        rest = inspect.Parameter("trainer_overrides", inspect.Parameter.VAR_KEYWORD)
        func.__signature__ = sig.replace(parameters=[*own, *run, rest])  # pyright: ignore[reportFunctionMemberAccess] read by inspect
        return func

    return decorate
