"""A run's spec: the arguments of ``wb.train`` checked and completed, the run directory written.

``prepare`` is what ``wb.train``, ``wb.launch`` and ``wb.launch_command`` share: it trains
nothing. The engine turns its result into a live ``Run``; torchrun workers rebuild the run
from the directory it writes.
"""

from __future__ import annotations

from pathlib import Path

from ..backends.registry import device_in_mode
from ..catalog import ModelSpec
from ..catalog import model as as_model
from ..data import DataSpec
from ..data import dataset as as_dataset
from ..rundir import run as runs
from ..rundir.writer import create
from ..views.progress import quiet_libraries
from . import recipe


def prepare(model: str | ModelSpec, data: str | DataSpec, *, max_steps: int | None = None, epochs: float | None = None,
            batch_size: int = 16, lr: float | None = None, precision: str = "auto", device: str = "auto",
            eval_every: int | None = None, save_every: int | None = None, log_every: int | None = None,
            run_dir: str | Path | None = None, name: str | None = None, max_length: int = 128, padding: str = "auto",
            buckets: int = 8, packing: str = "concat", seed: int = 0, compile: bool | None = None, mode: str | None = None,
            throughput_warmup_steps: int | None = None, report_to: str | list[str] | None = None,
            extra_spec: dict | None = None, sample_prompts: list[str] | None = None, sample_every: int | None = None,
            sample_steps: int = 10, cache_latents: bool = False, **trainer_overrides) -> Path:
    """Check the arguments (``wb.train`` documents them), create the run directory with its
    spec.json and a "prepared" summary; its path. Everything is checked before anything is
    written."""
    mspec, dspec = as_model(model), as_dataset(data)
    recipe.check(mspec.task, dspec.task, (mspec.name, dspec.name), max_steps=max_steps, batch_size=batch_size,
                 padding=padding, buckets=buckets, packing=packing, lr=lr, max_length=max_length)
    sampling = recipe.samples(mspec.task, sample_prompts, sample_every, sample_steps, eval_every)
    dev = device_in_mode(device, mode)
    recipe.check_precision(precision, dev)
    padding = recipe.default_padding(mspec.task, dev.kind) if padding == "auto" else padding
    recipe.check_padding(padding, mspec.task, mspec.name)
    recipe.check_cache_latents(cache_latents, mspec.task, mspec.name, dspec.crop, dspec.flip)
    lr = (5e-5 if mspec.is_pretrained else 1e-3) if lr is None else lr
    with quiet_libraries():  # the data read and the model's config checked before the run directory
        rows = dspec.load()["train"].num_rows
        recipe.check_fit(batch_size=batch_size, rows=rows, data_name=dspec.name, padding=padding,
                         max_length=max_length, positions=mspec.max_positions, model_name=mspec.name)
    cadence = recipe.cadence(recipe.total_steps(max_steps, epochs, rows, batch_size), log_every, save_every)
    args = {"max_steps": max_steps, "epochs": epochs, "batch_size": batch_size, "lr": lr,
            "precision": precision, "device": dev.kind if device == "auto" else device,
            "eval_every": eval_every, **cadence, "max_length": max_length, "padding": padding,
            "buckets": buckets, "packing": packing, "seed": seed, "compile": compile, "mode": mode,
            "throughput_warmup_steps": max(3, cadence["log_every"]) if throughput_warmup_steps is None else throughput_warmup_steps,
            "report_to": report_to, **sampling, "cache_latents": cache_latents, "trainer_overrides": trainer_overrides}
    path = runs.new_run_dir(name or f"{mspec.name}-{dspec.name}", run_dir)
    spec = {"model": mspec.to_dict(), "data": dspec.to_dict(), "args": args, **(extra_spec or {})}
    create(path, spec)  # the summary ("prepared") first, then the spec
    return path
