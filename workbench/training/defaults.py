"""The device's fast defaults for a user's own Trainer: its TrainingArguments and static shapes
(``wb.training_args``, ``wb.bucket_collator``).
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from ..backends.registry import device_in_mode
from ..runargs import FIELDS
from ..shapes import buckets as shapes
from ..shapes.batching import BucketCollator
from .recipe import auto_steps, device_fields, optim_name

# Reading the loss every step makes the host wait for the device: transformers' NaN filter
# reads it at every step (``torch.isnan(...)`` in a Python ``if``), so it is off; logging
# comes about 50 times a run (``recipe.auto_steps``) when the run's length is known.
QUIET = {"logging_nan_inf_filter": False, "include_num_input_tokens_seen": False}


def defaults_for(device, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The TrainingArguments fields the backend record chooses on ``device``, before the
    user's ``kwargs`` (which win: they are applied after)."""
    compile_ = device.backend.policy.compile_default(device.mode)
    if kwargs.get("torch_compile") is False:
        compile_ = False
    chosen = {
        **device_fields(device, device.resolve_precision("auto"), compile_),
        "optim": optim_name(device),
        **QUIET,
        "dataloader_pin_memory": device.kind != "cpu",
    }  # pinning needs an accelerator
    steps = kwargs.get("max_steps")
    if isinstance(steps, int) and steps > 0:
        chosen["logging_steps"] = auto_steps(steps)[0]
    return chosen


def training_args(output_dir: str, *, device: str = "auto", mode: str | None = None, **kwargs):
    """``transformers.TrainingArguments`` with the device's fast defaults; yours win.

    Parameters
    ----------
    output_dir : str
        Where the Trainer writes checkpoints (as for ``TrainingArguments``).
    device : str
        ``auto`` (the best available), ``hpu``, ``cuda`` or ``cpu``.
    mode : {"eager", "lazy", "compile"}, optional
        Gaudi's execution mode (``wb.train``'s ``mode``).
    **kwargs
        Any ``TrainingArguments`` field; each one given wins over the defaults.

    What the defaults are: bf16 where the chip has it (fp32 on a CPU); ``torch_compile``
    with ``hpu_backend`` in Gaudi's eager mode; the backend's AdamW by its ``optim`` name (on
    Gaudi the plain one: hpex's fused AdamW has no ``optim`` name, and ``wb.attach`` leaves
    the Trainer's optimizer as it is); DDP's backend
    under torchrun; no NaN filter, and logging about 50 times a run when ``max_steps`` is
    given (both avoid a device sync per step). Lazy mode's ``mark_step`` calls come with
    ``wb.attach`` / ``wb.callback()``.

    Examples
    --------
    >>> args = wb.training_args("out", max_steps=100)  # doctest: +SKIP
    """
    import transformers

    if not isinstance(output_dir, (str, bytes)) and not hasattr(output_dir, "__fspath__"):
        raise TypeError(
            f"output_dir must be a path, got {output_dir!r}: pass the directory "
            f"for the Trainer's checkpoints, e.g. wb.training_args('out', ...)"
        )
    fields = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    unknown = sorted(set(kwargs) - fields)
    if unknown:
        hints = ", ".join(_hint(k, fields) for k in unknown)
        raise ValueError(f"not TrainingArguments fields: {hints}")
    dev = device_in_mode(device, mode)
    return transformers.TrainingArguments(
        output_dir=str(output_dir), **{**defaults_for(dev, kwargs), **kwargs}
    )


def _hint(name: str, fields: set[str]) -> str:
    """``name`` and the field it likely meant: wb.train's words lead to TrainingArguments'."""
    spelled = {w: f.aliases[0] for w, f in FIELDS.items() if f.aliases}
    near = difflib.get_close_matches(name, [*spelled, *sorted(fields)], 1)
    if not near:
        return name
    if near[0] == name:  # wb.train's word, which TrainingArguments spells its own way
        return f"{name} (TrainingArguments calls it {spelled[name]})"
    if near[0] in spelled:
        return f"{name} (did you mean {spelled[near[0]]}, wb.train's {near[0]}?)"
    return f"{name} (did you mean {near[0]}?)"


def bucket_collator(
    tokenizer,
    *datasets,
    batch_size: int,
    buckets: int = 8,
    max_length: int | None = None,
    task: str = "classification",
    column: str = "input_ids",
):
    """A data collator that pads your tokenized dataset to at most ``buckets`` lengths.

    The lengths are the boundaries that waste the least padding over the rows of
    ``datasets`` (training and evaluation: every row must fit one); every batch is padded to
    its longest row's bucket and filled to ``batch_size`` rows (dummy rows take no loss).
    Pass it as the Trainer's ``data_collator``; the dataset stays as it is.

    Parameters
    ----------
    tokenizer
        Gives the pad token.
    *datasets
        Tokenized datasets (rows with ``column``).
    batch_size : int
        Rows of every batch: the larger of the train and eval batch sizes.
    buckets : int
        Most distinct lengths (static shapes).
    max_length : int, optional
        Rows are cut at this length (it is then the largest bucket).
    task : {"classification", "causal_lm"}
        How labels are padded (``causal_lm``: labels from the ids where a row has none).
    """
    if not datasets:
        raise ValueError(
            "bucket_collator(tokenizer, train_dataset, ...): pass the tokenized "
            "datasets the Trainer will read"
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r}: pass the Trainer's batch size per device")
    import numpy as np

    lengths = np.concatenate([shapes.lengths_of(d, column) for d in datasets])
    bounds = shapes.buckets(lengths, k=buckets, max_length=max_length)
    return LabelsCollator(BucketCollator(tokenizer, bounds, batch_size, task=task))


class LabelsCollator:
    """A collator that hands rows' ``label`` or ``label_ids`` to ``inner`` as ``labels`` (as
    transformers' collators do), so dummy rows' labels pad with -100."""

    RENAMED = ("label", "label_ids")

    def __init__(self, inner: BucketCollator):
        self.inner = inner
        self.boundaries = inner.boundaries  # the static lengths
        self.shapes = inner.shapes  # (rows, length) of every batch made so far

    def __call__(self, features):
        return self.inner(
            [{("labels" if k in self.RENAMED else k): v for k, v in f.items()} for f in features]
        )
