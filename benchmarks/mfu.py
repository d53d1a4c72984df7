"""Model FLOPs utilisation: the plain Trainer and wb.train on packed GPT-2 blocks."""

from __future__ import annotations

import functools
import statistics
from typing import Any

from workbench.backends.registry import device as pick
from workbench.planning.flops import flops_per_token

from .contenders import SHAPES, engine_setup, interleaved, plain_trainer, wb_train


def _ways(compile: bool, train_args: dict | None, contenders: list[str] | None) -> dict[str, Any]:
    """The contenders to time, all on packed blocks."""
    ways = {
        "trainer": functools.partial(plain_trainer, packed=True),
        "workbench": functools.partial(wb_train, padding="packed", train_args=train_args),
    }
    if compile:  # the compiled Trainer shows what compile=True adds beyond torch.compile itself
        ways["trainer_compiled"] = functools.partial(plain_trainer, packed=True, compile=True)
        ways["workbench_compiled"] = functools.partial(
            wb_train, padding="packed", train_args=train_args, compile=True
        )
    if contenders is None:
        return ways
    unknown = sorted(set(contenders) - set(ways))
    if unknown or not contenders:
        raise ValueError(
            f"unknown ways {unknown}; choose from {', '.join(ways)}"
            + ("" if compile else " (the *_compiled ways need compile=True)")
        )
    return {k: ways[k] for k in contenders}


def _summary(rates: dict[str, list[float]], per_token: int, peak: float | None):
    """(results, ratios, figures, best) from each contender's tokens/s per round."""
    results, ratios = {}, {}
    for name, all_rates in rates.items():
        tokens_per_s = statistics.median(all_rates)
        achieved = per_token * tokens_per_s
        results[name] = {
            "tokens_per_s": tokens_per_s,
            "achieved_tflops": achieved / 1e12,
            "all": all_rates,
        }
        if peak:
            results[name]["mfu"] = achieved / (peak * 1e12)
    engines = [k for k in results if k != "trainer"]
    if "trainer" in results:
        for name in engines:
            ratios[f"{name}_vs_trainer"] = (
                results[name]["tokens_per_s"] / results["trainer"]["tokens_per_s"]
            )
    if {"trainer_compiled", "workbench_compiled"} <= set(results):
        ratios["workbench_compiled_vs_trainer_compiled"] = (
            results["workbench_compiled"]["tokens_per_s"]
            / results["trainer_compiled"]["tokens_per_s"]
        )
    best = max(
        (k for k in engines if k.startswith("workbench")),
        key=lambda k: results[k]["tokens_per_s"],
        default=None,
    )
    figures = {"flops_per_token": per_token}
    if peak:
        figures["peak_tflops"] = peak
    if best is not None:
        figures.update(
            workbench_tokens_per_s=results[best]["tokens_per_s"],
            workbench_achieved_tflops=results[best]["achieved_tflops"],
        )
        if peak:
            ratios["mfu"] = results[best]["mfu"]
    return results, ratios, figures, best


def run(
    steps: int = 20,
    warmup: int = 3,
    repeats: int = 3,
    batch_size: int | None = None,
    seq_len: int = 1024,
    device: str = "auto",
    precision: str = "auto",
    model: str = "gpt2-124m",
    compile: bool = False,
    log_every: int = 10,
    config: dict | None = None,
    contenders: list[str] | None = None,
    train_args: dict | None = None,
) -> dict[str, Any]:
    """Model FLOPs utilisation of a GPT-2-124M-shaped model on packed blocks, side by side:
    the plain Trainer with its defaults (``trainer``) and wb.train (``workbench``; with
    ``compile=True`` also both with torch.compile, ``trainer_compiled`` and
    ``workbench_compiled``), the same blocks and precision for all. MFU and the
    ``workbench_*`` figures are those of the faster wb.train contender.

    FLOPs per token: see ``flops_per_token``. MFU = FLOPs/token x tokens/s / peak; on a CPU
    there is no peak in the table, so only the achieved TFLOP/s is reported.
    Compilation happens in the warm-up steps, which are not timed. Both engines log every
    ``log_every`` steps (a logging step waits for the device to read the loss; 0: each its
    own default, as in ``engine``). ``config`` overrides fields of the model's config (e.g.
    ``{"resid_pdrop": 0}``); ``contenders`` times only some of the contenders (the
    ``*_vs_trainer`` ratios need ``trainer``); ``train_args`` go to ``wb.train`` (so to
    ``TrainingArguments``), e.g. ``{"torch_compile_mode": "max-autotune"}``.
    """
    dev = pick(device)
    precision = dev.resolve_precision(precision)
    spec, data = engine_setup(model, config)
    if spec.task != "causal_lm":
        raise ValueError(
            f"mfu measures a causal LM on packed blocks; {model!r} is a {spec.task} shape: "
            f"use one of {', '.join(k for k, v in SHAPES.items() if v[0] == 'gpt2')}"
        )
    if batch_size is None:
        batch_size = 16 if dev.kind != "cpu" else 2
    if dev.kind == "cpu":
        seq_len = min(seq_len, 256)
    ways = _ways(compile, train_args, contenders)
    per_token = flops_per_token(spec, seq_len)
    steps_per_s = interleaved(
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
    rates = {k: [v * batch_size * seq_len for v in vals] for k, vals in steps_per_s.items()}
    peak = dev.chip.tflops.get(precision) if dev.chip is not None else None  # None: no MFU
    results, ratios, figures, best = _summary(rates, per_token, peak)
    return {
        "bench": "mfu",
        "device": dev.to_dict(),
        "precision": precision,
        "config": {
            "model": model,
            "params": spec.num_params,
            "batch_size": batch_size,
            "seq_len": seq_len,
            "warmup_steps": warmup,
            "timed_steps": steps,
            "repeats": repeats,
            "compile": compile,
            "log_every": log_every,
            "best": best,
            "config_overrides": dict(config or {}),
            "train_args": dict(train_args or {}),
        },
        "results": results,
        "figures": figures,
        "ratios": ratios,
    }
