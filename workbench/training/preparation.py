"""A run's spec made: the arguments checked against the model, the data and the device, and
the run directory written (``wb.train``, ``wb.launch``, ``wb.launch_command``); the spec of a
resume. Everything is checked before anything is written.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from pathlib import Path
from typing import Any

from ..backends.registry import backend, check_mode, device, device_in_mode, launch_env
from ..backends.registry import device as pick_device
from ..catalog.modelspec import ModelSpec, is_local
from ..catalog.modelspec import model as as_model
from ..data.dataset import DataSpec
from ..data.dataset import dataset as as_dataset
from ..liblogs import quiet_libraries
from ..runargs import REFUSED, RunArgs, caller_only, check_overrides, check_value
from ..rundir import run as runs
from ..rundir.spec import Launch, Resume, RunSpec
from ..rundir.writer import create
from . import recipe


def prepare(
    model: str | ModelSpec,
    data: str | DataSpec,
    *,
    extra_spec: dict | None = None,
    target: str | None = None,
    **options,
) -> Path:
    """Check the arguments (``wb.train`` documents them), create the run directory with its
    spec.json and a "prepared" summary; its path. ``target``: the device kind of the machines
    that will train it (``wb.launch_command``), whose defaults the spec takes.
    """
    a = RunArgs.from_options(options)
    mspec, dspec = as_model(model), as_dataset(data)
    recipe.check(mspec.task, dspec.task, (mspec.name, dspec.name))
    sampling = recipe.samples(
        mspec.task, a.sample_prompts, a.sample_every, a.sample_steps, a.eval_every
    )
    if target is not None:
        kind = backend(target).kind
        if a.mode is not None:
            check_mode(a.mode, kind)
    else:
        launch = (extra_spec or {}).get("launch")
        if launch:
            # the workers are new processes that choose their own mode before their bridge
            # loads: this process's mode (fixed once its bridge loaded) is not asked for
            dev = device(a.device)  # reads HLML and the OS: takes no card
            check_mode(a.mode, dev.kind)
        else:
            dev = device_in_mode(a.device, a.mode)  # reads HLML and the OS: takes no card
        recipe.check_precision(a.precision, dev)
        kind = dev.kind
        if launch:  # workers of this machine go on free cards, or nothing starts
            extra_spec = {
                **(extra_spec or {}),
                "launch": {**launch, "env": launch_env(dev, launch["devices"], a.mode)},
            }
    # every name a run's argument or a TrainingArguments one; after the device's mode is set:
    # TrainingArguments imports torch, which loads the Habana bridge in the mode set by then
    check_overrides(options, new_run=True)
    padding = recipe.default_padding(mspec.task, kind) if a.padding == "auto" else a.padding
    recipe.check_padding(padding, mspec.task, mspec.name)
    recipe.check_cache_latents(a.cache_latents, mspec.task, mspec.name, dspec.crop, dspec.flip)
    lr = (5e-5 if mspec.is_pretrained else 1e-3) if a.lr is None else a.lr
    with quiet_libraries():  # the data read and the model's config checked before the run directory
        train = dspec.load()["train"]
        rows = train.num_rows
        recipe.check_fit(
            batch_size=a.batch_size,
            rows=rows,
            data_name=dspec.name,
            padding=padding,
            max_length=a.max_length,
            positions=mspec.max_positions,
            model_name=mspec.name,
        )
        source = mspec._tokenizer_source()
        # blocks, not rows, make the steps: at least one block. Counted with a tokenizer on
        # this machine only: a hub id's is fetched (or refused, offline) when the run trains
        if padding == "packed" and source is not None and is_local(source):
            from ..shapes.batching import chunk_tokens

            tokens = chunk_tokens(
                train, dspec.columns["text"], mspec.load_tokenizer(), a.max_length
            )
            recipe.check_blocks(tokens, a.max_length, rows, dspec.name)
        head = mspec.new_head(dspec.num_labels)  # a saved classifier of other classes
    if head is not None:
        warnings.warn(head, UserWarning, stacklevel=3)  # said once, by the call making the run
    total = recipe.total_steps(a.max_steps, a.epochs, rows, a.batch_size)
    cadence = recipe.cadence(total, a.log_every, a.save_every)
    warmup = a.throughput_warmup_steps
    args = dataclasses.replace(
        a,
        lr=lr,
        padding=padding,
        **cadence,
        **sampling,
        device=kind if target is not None or a.device == "auto" else a.device,
        throughput_warmup_steps=recipe.throughput_warmup(warmup, cadence["log_every"]),
        run_dir=None,  # where the run is, not how it trains
        name=None,
    )
    path = runs.new_run_dir(a.name or f"{mspec.name}-{dspec.name}", a.run_dir)
    launch = (extra_spec or {}).get("launch")
    spec = RunSpec(
        model=mspec.to_dict(),
        data=dspec.to_dict(),
        args=args,
        launch=None if launch is None else Launch(**launch),
    )
    create(path, spec)  # the summary ("prepared") first, then the spec
    return path


def resume_spec(run: runs.RunDir, ckpt: Path, max_steps: int | None, overrides: dict) -> RunSpec:
    """The run's spec for a resume from ``ckpt``, every override checked as ``wb.train`` checks
    it before anything is written; the previous arguments stay in its ``resumes``."""
    import transformers

    spec = run.spec
    step = int(ckpt.name.split("-")[-1])
    check_value("max_steps", max_steps)  # as wb.train checks it
    fields, trainer_overrides = check_overrides(overrides)
    # the run's own end: its max_steps, or (trained by epochs) the steps its summary counted
    planned = spec.args.max_steps or run.summary.get("max_steps")
    more = f"resume(max_steps={step + (planned or step)})"
    previous = spec.to_dict()["args"]
    held = caller_only(spec.args)
    missing = {k: v for k, v in held.items() if k not in REFUSED and k not in overrides}
    if missing:
        said = ", ".join(f"{k}={v!r}" for k, v in missing.items())
        raise ValueError(
            f"{run.name}'s spec.json sets {said}: where a run's results and metrics go is "
            f"yours to say at each call, never a run directory's. Say it again to keep it, "
            f"resume({said}), or pass another value (report_to='none', push_to_hub=False)"
        )
    kept = dict(spec.args.trainer_overrides)
    for key in REFUSED:  # never from a run's files (a planted one); no caller can pass them
        if kept.pop(key, None) is not None:
            print(
                f"{run.name}'s spec.json sets {key}=...: ignored ({REFUSED[key]})", file=sys.stderr
            )
    if max_steps is not None:
        fields = {"max_steps": max_steps, **fields}
    args = dataclasses.replace(spec.args, **fields, trainer_overrides={**kept, **trainer_overrides})
    targs = recipe.training_arguments(
        args, pick_device(args.device), spec.model["task"], run.path, "adamw_torch"
    )
    try:
        transformers.TrainingArguments(**targs)
    except (TypeError, ValueError) as e:
        shown = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
        raise ValueError(f"resume({shown}) would not run: {e}") from None
    if max_steps is None and "epochs" not in fields and planned is not None and step >= planned:
        # Trainer would still take a step past the end, and rotate a checkpoint away
        raise ValueError(
            f"{run.name} already reached its end ({ckpt.name}, max_steps={planned}): resume() "
            f"has nothing to train. Pass a larger total to train on, e.g. {more}"
        )
    if max_steps is not None and max_steps <= step:
        original = (
            f", or leave it out for the original {planned}"
            if planned is not None and planned > step
            else ""
        )
        raise ValueError(
            f"resume(max_steps={max_steps}): {ckpt.name} is already at step {step}; "
            f"max_steps is the new total, so pass one above {step} (e.g. {more}){original}"
        )
    entry = Resume(origin=ckpt.name, max_steps=max_steps, at=runs.now(), previous_args=previous)
    return spec.replace(args=args).resumed(entry)


def launch_extra(devices: int, strategy: str, zero_stage: int | None) -> dict[str, Any]:
    """The spec's ``launch`` entry: how many workers, and how they share the model."""
    return {"launch": {"devices": devices, "strategy": strategy, "zero_stage": zero_stage}}
