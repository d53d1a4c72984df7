"""A run's arguments: every name ``wb.train`` takes, its default and its check, stated once.

``RunArgs`` is the record ``wb.train``, ``wb.launch``, ``wb.launch_command``, ``wb.profile``,
the pickers and the train form share: they read their defaults from ``FIELDS`` when they are
called, so a default changed here is a default changed everywhere. A name transformers'
``TrainingArguments`` spells differently (``learning_rate`` for ``lr``) is an alias of the
record's field: it is checked as the field is, never passed through unchecked.

Checks here need only the values; the ones that need the model, the data or the device
(a task the data does not have, a precision the chip cannot run) live in ``recipe``.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .backends.hpu import MODES
from .backends.registry import PRECISIONS
from .batching import PACKINGS

# The one padding vocabulary: wb.train's ``padding=``, the shape statistics and the pickers.
PADDINGS = ("auto", "longest", "max_length", "bucketed", "packed")


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
        or not value > 0
        or math.isinf(value)
    ):
        raise ValueError(f"{name} must be a number of epochs above 0, got {value!r}")


def _lr(name: str, value) -> None:
    if not (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and value > 0
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
    """One argument of a run: its default, its check, and the TrainingArguments names that
    mean the same thing."""

    default: Any
    check: Any = _anything  # check(name, value) raises with the fix; None is the default's
    aliases: tuple[str, ...] = ()
    annotation: Any = Any


# The arguments of a run, in wb.train's order. The spec of a run keeps them under "args".
FIELDS: dict[str, Field] = {
    "max_steps": Field(None, _optional(_positive_int), annotation=int | None),
    "epochs": Field(None, _optional(_epochs), ("num_train_epochs",), float | None),
    "batch_size": Field(16, _positive_int, ("per_device_train_batch_size",), int),
    "lr": Field(None, _optional(_lr), ("learning_rate",), float | None),
    "precision": Field("auto", _one_of(*PRECISIONS), annotation=str),  # the device table's
    "device": Field("auto", annotation=str),  # checked by the device table (names the known ones)
    "eval_every": Field(None, _optional(_positive_int), ("eval_steps",), int | None),
    "save_every": Field(None, _optional(_positive_int), ("save_steps",), int | None),
    "log_every": Field(None, _optional(_positive_int), ("logging_steps",), int | None),
    "run_dir": Field(None, annotation=str | Path | None),  # checked where it is made
    "name": Field(None, _optional(_run_name), annotation=str | None),
    "max_length": Field(128, _positive_int, annotation=int),
    "padding": Field("auto", _one_of(*PADDINGS), annotation=str),
    "buckets": Field(8, _positive_int, annotation=int),
    "packing": Field("concat", _one_of(*PACKINGS), annotation=str),
    "seed": Field(0, _int_at_least_0, annotation=int),
    "compile": Field(None, _optional(_bool), annotation=bool | None),
    "mode": Field(None, _optional(_one_of(*MODES)), annotation=str | None),
    "throughput_warmup_steps": Field(None, _optional(_int_at_least_0), annotation=int | None),
    "report_to": Field(None, annotation=str | list | None),
    "sample_prompts": Field(None, annotation=list | None),  # checked with the model's task
    "sample_every": Field(None, annotation=int | None),
    "sample_steps": Field(10, annotation=int),
    "cache_latents": Field(False, _bool, annotation=bool),
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


class RunArgs:
    """The arguments of one run: every field of ``FIELDS`` (defaults filled in) and the
    TrainingArguments overrides, checked when made.

    ``RunArgs.from_options(options)`` takes the keywords a user passed to ``wb.train``;
    ``to_dict`` / ``from_dict`` round-trip it. Values are read as attributes (``args.lr``).
    """

    __slots__ = ("values", "trainer_overrides")

    def __init__(self, values: dict[str, Any], trainer_overrides: dict[str, Any] | None = None):
        object.__setattr__(self, "values", dict(values))
        object.__setattr__(self, "trainer_overrides", dict(trainer_overrides or {}))

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> RunArgs:
        """Split ``options`` into the run's fields and TrainingArguments overrides; an alias
        becomes its field; every value is checked; the defaults fill the rest."""
        values, overrides = {}, {}
        for key, value in options.items():
            if key in FIELDS:
                values[key] = value
            elif key in ALIASES:
                field = ALIASES[key]
                if field in options:
                    raise ValueError(
                        f"{key}= and {field}= name the same argument; pass only "
                        f"{field}={options[field]!r}"
                    )
                values[field] = value
            else:
                overrides[key] = value
        for key, value in values.items():
            FIELDS[key].check(key if key in options else _alias_used(key, options), value)
        full = {name: values.get(name, f.default) for name, f in FIELDS.items()}
        return cls(full, overrides)

    def to_dict(self) -> dict[str, Any]:
        return {**self.values, "trainer_overrides": dict(self.trainer_overrides)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunArgs:
        d = dict(d)
        overrides = d.pop("trainer_overrides", {})
        return cls({name: d.get(name, f.default) for name, f in FIELDS.items()}, overrides)

    def replace(self, **changes) -> RunArgs:
        """A copy with ``changes`` (fields), each checked."""
        for key, value in changes.items():
            FIELDS[key].check(key, value)
        return RunArgs({**self.values, **changes}, self.trainer_overrides)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        raise AttributeError("RunArgs is read-only: use replace(...)")

    def __eq__(self, other) -> bool:
        return isinstance(other, RunArgs) and other.to_dict() == self.to_dict()

    def __repr__(self) -> str:
        changed = {
            k: v for k, v in self.values.items() if k not in FIELDS or v != FIELDS[k].default
        }
        parts = [f"{k}={v!r}" for k, v in {**changed, **self.trainer_overrides}.items()]
        return f"RunArgs({', '.join(parts)})"


def _alias_used(field: str, options: dict[str, Any]) -> str:
    return next(a for a in FIELDS[field].aliases if a in options)


# TrainingArguments fields a run's spec.json may carry into ``resume()``: how the model
# trains (optimizer, schedule, batches, precision, compilation, evaluation and saving
# cadence, distributed settings). Every other field is the caller's to state at each call,
# never a run directory's (docs/runs.md: a run directory is data): where results and
# metrics go (push_to_hub, hub_*, report_to, run_name, project, trackio_*) and the files a
# run reads (deepspeed, fsdp_config, accelerator_config paths). An allow-list: a field a
# later transformers adds is refused from a spec until it is read and added here.
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


def caller_only(args: dict[str, Any]) -> dict[str, Any]:
    """What a run spec's ``args`` sets that only a caller may: TrainingArguments overrides
    outside ``RESUMABLE`` and a ``report_to`` that reports anywhere."""
    held = {k: v for k, v in (args.get("trainer_overrides") or {}).items() if k not in RESUMABLE}
    if args.get("report_to") not in (None, "none", [], ["none"]):
        held["report_to"] = args["report_to"]
    return held


def check_overrides(overrides: dict[str, Any], new_run: bool = False) -> tuple[dict, dict]:
    """Check a new run's options (``new_run``) or a resume's overrides: run fields (and their
    aliases) by their checks, every other name must be a TrainingArguments field; one error
    naming the bad ones, each with the nearest name of either kind (``bach_size``: did you
    mean batch_size?), before anything is written. A resume's model and data are fixed: a
    new run takes new ones. Returns (fields, TrainingArguments overrides)."""
    import dataclasses
    import difflib

    import transformers

    split = RunArgs.from_options(overrides)  # checks fields and aliases
    check_refused(split.trainer_overrides)
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


def given(func, values: dict[str, Any]) -> dict[str, Any]:
    """The run arguments among ``values`` (``func``'s keywords, its ``locals()``) that the
    caller chose: those that differ from ``func``'s own default.

    ``wb.train``, ``wb.launch``, ``wb.launch_command`` and ``wb.profile`` spell every field
    as a keyword, so that editors and type checkers see them; tests/test_signatures.py holds
    each signature to ``FIELDS``. They hand on only what the caller chose: the record fills
    in the rest (``RunArgs.from_options``), so its defaults are the ones that count, and an
    alias (``learning_rate=``) is not met by its field's default (``lr=None``)."""
    defaults = _keyword_defaults(func)
    return {
        k: v
        for k, v in values.items()
        if k in FIELDS and not (type(v) is type(defaults[k]) and v == defaults[k])
    }


@functools.cache
def _keyword_defaults(func) -> dict[str, Any]:
    return {
        name: p.default
        for name, p in inspect.signature(func).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
