"""Raw PyTorch loop vs plain Trainer vs wb.train on the same model and batches."""

from __future__ import annotations

import functools
import statistics
from typing import Any

from workbench.backends.registry import device as pick
from workbench.liblogs import quiet_libraries

from .contenders import engine_setup, interleaved, plain_trainer, raw_loop, wb_train


def run(
    steps: int = 40,
    warmup: int = 5,
    repeats: int = 5,
    batch_size: int = 16,
    seq_len: int = 128,
    device: str = "auto",
    precision: str = "auto",
    model: str = "bert-mini",
    compile: bool = False,
    log_every: int = 10,
) -> dict[str, Any]:
    """Raw PyTorch loop vs plain Trainer vs wb.train on the same model and batches
    (``compile=True`` adds wb.train with torch.compile, compiled in its warm-up steps).

    The Trainer and wb.train both log every ``log_every`` steps: a logging step reads the
    loss, which waits for the device, so a cadence that differs would be measured instead
    of the engines. ``log_every=0`` gives each its own default instead (the Trainer: every
    500 steps; wb.train: every step of a run this short, but on one GPU or HPU no sooner
    than 0.5 s after the last event)."""
    dev = pick(device)
    precision = dev.resolve_precision(precision)
    spec, data = engine_setup(model)
    ways = {"raw": raw_loop, "trainer": plain_trainer, "workbench": wb_train}
    if compile:
        ways["workbench_compiled"] = functools.partial(wb_train, compile=True)
    with (
        quiet_libraries()
    ):  # the plain Trainer's save shows transformers' "Writing model shards" bar
        samples = interleaved(
            ways,
            repeats,
            spec,
            data,
            dev,
            warmup,
            steps,
            batch_size,
            seq_len,
            precision,
            log_every=log_every,
        )
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "bench": "engine",
        "device": dev.to_dict(),
        "precision": precision,
        "config": {
            "model": model,
            "batch_size": batch_size,
            "seq_len": seq_len,
            "warmup_steps": warmup,
            "timed_steps": steps,
            "repeats": repeats,
            "compile": compile,
            "log_every": log_every,
        },
        "results": {k: {"steps_per_s": med[k], "all": samples[k]} for k in ways},
        "ratios": {
            "wb_vs_raw": med["workbench"] / med["raw"],
            "wb_vs_trainer": med["workbench"] / med["trainer"],
            **(
                {"wb_compiled_vs_trainer": med["workbench_compiled"] / med["trainer"]}
                if compile
                else {}
            ),
        },
    }
