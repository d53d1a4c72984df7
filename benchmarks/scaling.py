"""One process against several torchrun workers, the same per-device batch."""

from __future__ import annotations

import os
import statistics
import tempfile
from typing import Any

from workbench.backends.registry import device as pick
from workbench.catalog.modelspec import model as as_model
from workbench.data.dataset import dataset as as_dataset
from workbench.scaleout.launcher import launch
from workbench.training.engine import train

from .contenders import rotated


def run(
    steps: int = 60, repeats: int = 2, devices: int = 2, device: str = "auto"
) -> dict[str, Any]:
    """One process against ``devices`` torchrun workers (same per-device batch), tokens/s."""
    dev = pick(device)
    spec, data = as_model("gpt2", size="tiny"), as_dataset("docstrings-lm")
    kw = dict(
        max_steps=steps,
        batch_size=8,
        max_length=64,
        log_every=5,
        device=dev.kind,
        live=False,
        throughput_warmup_steps=10,
        save_every=10_000,
    )
    samples: dict[str, list[float]] = {"1 process": [], f"{devices} processes": []}
    cwd = os.getcwd()
    for r in range(repeats):
        with tempfile.TemporaryDirectory() as out:
            os.chdir(out)  # torchrun workers resolve the run directory from here
            try:
                for name in rotated(list(samples), r):
                    if name == "1 process":
                        run = train(spec, data, run_dir=out, **kw)
                    else:
                        run = launch(spec, data, devices=devices, run_dir=out, **kw)
                    samples[name].append(run.summary["tokens_per_s"])
            finally:
                os.chdir(cwd)
    med = {k: statistics.median(v) for k, v in samples.items()}
    one, many = med["1 process"], med[f"{devices} processes"]
    return {
        "bench": "scaling",
        "device": dev.to_dict(),
        "config": {
            "model": "gpt2-tiny",
            "steps": steps,
            "batch_size_per_process": 8,
            "seq_len": 64,
            "devices": devices,
            "repeats": repeats,
            "cpu_cores": os.cpu_count(),
        },
        "results": {k: {"tokens_per_s": med[k], "all": samples[k]} for k in samples},
        "ratios": {f"{devices}_vs_1": many / one},
    }
