"""The same transformers.Trainer with and without ``wb.attach``: what the attachment costs."""

from __future__ import annotations

import statistics
from typing import Any

from workbench.backends.registry import device as pick
from workbench.liblogs import quiet_libraries

from .contenders import engine_setup, interleaved, plain_trainer


def run(
    steps: int = 40,
    warmup: int = 5,
    repeats: int = 7,
    batch_size: int = 16,
    seq_len: int = 128,
    device: str = "auto",
    precision: str = "auto",
    model: str = "bert-mini",
    log_every: int = 10,
) -> dict[str, Any]:
    """A plain Trainer vs the same Trainer with ``wb.attach(trainer)``, in interleaved
    rounds (the order rotates each round, so a loaded machine slows both alike).

    Both see the same batches (padded to ``seq_len``: the tokens per step are the same, so
    tokens/s is steps/s times ``batch_size * seq_len``) and log every ``log_every`` steps
    as the Trainer's arguments say; the attachment adds its own logging steps (about 50 a
    run) and writes its events, as it does for a user. The ratio is of the medians; the
    noise band is the plain Trainer's own spread over its rounds, (max - min) / median."""
    dev = pick(device)
    precision = dev.resolve_precision(precision)
    spec, data = engine_setup(model)
    ways = {
        "trainer": plain_trainer,
        "attached": lambda *a, **k: plain_trainer(*a, attached=True, **k),
    }
    with quiet_libraries():
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
    tokens = batch_size * seq_len
    med = {k: statistics.median(v) * tokens for k, v in samples.items()}
    plain = [v * tokens for v in samples["trainer"]]
    noise = (max(plain) - min(plain)) / med["trainer"]
    ratio = med["attached"] / med["trainer"]
    return {
        "bench": "attachment",
        "device": dev.to_dict(),
        "precision": precision,
        "config": {
            "model": model,
            "batch_size": batch_size,
            "seq_len": seq_len,
            "warmup_steps": warmup,
            "timed_steps": steps,
            "repeats": repeats,
            "log_every": log_every,
        },
        "results": {
            k: {"tokens_per_s": med[k], "all": [v * tokens for v in samples[k]]} for k in ways
        },
        "figures": {"noise_band": noise, "within_noise": float(abs(ratio - 1) <= noise)},
        "ratios": {"attached_vs_trainer": ratio},
    }
