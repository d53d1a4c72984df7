"""Benchmarks that measure ratios side by side in one process.

    python -m workbench.bench engine --json out.json

Each benchmark warms up, synchronises the device before reading the clock, repeats the
contenders in interleaved rounds (so that a noisy neighbour slows all of them alike) and
reports medians and their ratios. The JSON has ``results`` and ``ratios``.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Random-init models of well-known shapes (the bundled tokenizers use fewer ids than the
# embedding tables hold; FLOPs and memory are those of the real shapes).
SHAPES = {
    # BERT-mini: big enough that a CPU step takes tens of milliseconds
    "bert-mini": ("bert", {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
                           "intermediate_size": 1024}, "docstrings-topic"),
    "bert-base": ("bert", {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
                           "intermediate_size": 3072, "vocab_size": 30522}, "docstrings-topic"),
    # GPT-2-mini: the harness's own tests and quick looks on a CPU
    "gpt2-mini": ("gpt2", {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_positions": 1024}, "docstrings-lm"),
    "gpt2-124m": ("gpt2", {"n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024,
                           "vocab_size": 50257}, "docstrings-lm"),
}
# dense bf16 peak, TFLOP/s (shared/HPU_FACTS.md), matched against the device name/generation
PEAK_TFLOPS = {"Gaudi2": 432, "Gaudi3": 1835, "A100": 312, "H100": 989, "H200": 989}


def peak_tflops(dev) -> float | None:
    """The device's dense bf16 peak, or None where unknown (CPUs)."""
    label = f"{dev.generation or ''} {dev.name}"
    return next((v for k, v in PEAK_TFLOPS.items() if k in label), None)


class _Timer:
    """A TrainerCallback that notes the clock at two step boundaries (after a sync)."""

    def __init__(self, device, start: int, end: int):
        self.device, self.start, self.end = device, start, end
        self.t: dict[int, float] = {}

    def on_step_end(self, args, state, control, **kw):
        if state.global_step in (self.start, self.end):
            self.device.synchronize()
            self.t[state.global_step] = time.perf_counter()

    def steps_per_s(self) -> float:
        return (self.end - self.start) / (self.t[self.end] - self.t[self.start])


def _timer(device, start, end):
    from .engine import _as_callback

    return _as_callback(_Timer(device, start, end))


def _engine_setup(shape: str = "bert-mini", config: dict | None = None):
    from .catalog import model as as_model
    from .data import dataset as as_dataset

    if shape not in SHAPES:
        raise ValueError(f"unknown model shape {shape!r}; known: {', '.join(SHAPES)}")
    family, overrides, data = SHAPES[shape]
    return as_model(family, size="tiny", **{**overrides, **(config or {})}), as_dataset(data)


def _config_value(text: str):
    """A ``--config KEY=VALUE`` value: a JSON number, boolean or null, else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _raw_loop(spec, data, device, warmup, steps, batch_size, seq_len, precision, seed=0, log_every=None):
    """The reference: forward, backward, optimizer step; nothing else (no logging)."""
    import torch
    import transformers

    from .engine import _collator

    transformers.set_seed(seed)
    model, tok = spec.build(num_labels=data.num_labels)
    model.to(device.torch_device).train()
    train = data.prepare(tok, max_length=seq_len)["train"]
    collate = _collator(spec.task, tok, model, "max_length", seq_len)
    gen = torch.Generator().manual_seed(seed)
    loader = torch.utils.data.DataLoader(train, batch_size=batch_size, shuffle=True, generator=gen,
                                         collate_fn=collate, drop_last=True)
    fused = device.kind in ("cuda", "cpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    it = iter(loader)
    t0 = None
    for step in range(warmup + steps):
        if step == warmup:
            device.synchronize()
            t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            it = iter(loader)
            batch = next(it)
        batch = {k: v.to(device.torch_device) for k, v in batch.items()}
        with torch.autocast(device_type=device.backend.torch_device, dtype=dtype, enabled=dtype is not None):
            loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        device.mark_step()
    device.synchronize()
    return steps / (time.perf_counter() - t0)


def _plain_trainer(spec, data, device, warmup, steps, batch_size, seq_len, precision, seed=0, log_every=10,
                   packed=False, compile=False):
    """transformers.Trainer with its defaults (what a user writes without the workbench), on
    the same batches as wb.train: padded to ``seq_len``, or (``packed``) the same packed
    blocks as ``padding="packed"`` with the Trainer's default collator. ``log_every=0``:
    the Trainer's own default cadence; ``compile``: ``torch_compile=True``. Steps/s."""
    import transformers

    from .engine import _collator
    from .shapes import pack

    transformers.set_seed(seed)
    model, tok = spec.build(num_labels=data.num_labels)
    train = data.prepare(tok, max_length=seq_len)["train"]
    if packed:
        train, collate = pack(train, seq_len, tok.eos_token_id), transformers.default_data_collator
    else:
        collate = _collator(spec.task, tok, model, "max_length", seq_len)
    timer = _timer(device, warmup, warmup + steps)
    cadence = {"logging_steps": log_every} if log_every else {}
    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(
            output_dir=out, per_device_train_batch_size=batch_size, max_steps=warmup + steps,
            learning_rate=1e-3, report_to="none", disable_tqdm=True, seed=seed, **cadence,
            use_cpu=device.kind == "cpu", bf16=precision == "bf16", fp16=precision == "fp16",
            torch_compile=compile)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=train, data_collator=collate,
                                       callbacks=[timer])
        trainer.remove_callback(transformers.PrinterCallback)
        trainer.train()
    return timer.steps_per_s()


def _workbench(spec, data, device, warmup, steps, batch_size, seq_len, precision, seed=0, compile=None,
               log_every=10, padding="max_length", train_args=None):
    """wb.train headless, with its defaults (events, logging, device-aware choices); steps/s.
    ``train_args`` are further wb.train (TrainingArguments) fields; ``log_every=0``: wb.train's
    own default cadence."""
    from .engine import train

    timer = _timer(device, warmup, warmup + steps)
    with tempfile.TemporaryDirectory() as out:
        # checkpoints as often as the plain Trainer's default (every 500 steps)
        train(spec, data, max_steps=warmup + steps, batch_size=batch_size, lr=1e-3, max_length=seq_len,
              padding=padding, precision=precision, device=device.kind, live=False, run_dir=out,
              save_every=500, log_every=log_every or None, seed=seed, compile=compile, callbacks=[timer],
              **(train_args or {}))
    return timer.steps_per_s()


def _interleaved(ways: dict[str, Any], repeats: int, *args, **kwargs) -> dict[str, list[float]]:
    """Each way's result per round; the order rotates every round, so that no contender
    always goes first (and a noisy neighbour slows all of them alike)."""
    samples: dict[str, list[float]] = {k: [] for k in ways}
    names = list(ways)
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(ways[name](*args, **kwargs))
    return samples


def engine(steps: int = 40, warmup: int = 5, repeats: int = 5, batch_size: int = 16, seq_len: int = 128,
           device: str = "auto", precision: str = "auto", model: str = "bert-mini",
           compile: bool = False, log_every: int = 10) -> dict[str, Any]:
    """Raw PyTorch loop vs plain Trainer vs wb.train on the same model and batches
    (``compile=True`` adds wb.train with torch.compile, compiled in its warm-up steps).

    The Trainer and wb.train both log every ``log_every`` steps: a logging step reads the
    loss, which waits for the device, so a cadence that differs would be measured instead
    of the engines. ``log_every=0`` gives each its own default instead (the Trainer: every
    500 steps; wb.train: every step of a run this short, but on one GPU or HPU no sooner
    than 0.5 s after the last event)."""
    from .device import device as pick
    from .engine import _precision

    dev = pick(device)
    precision = _precision(dev, precision)
    spec, data = _engine_setup(model)
    ways = {"raw": _raw_loop, "trainer": _plain_trainer, "workbench": _workbench}
    if compile:
        ways["workbench_compiled"] = functools.partial(_workbench, compile=True)
    samples = _interleaved(ways, repeats, spec, data, dev, warmup, steps, batch_size, seq_len, precision,
                           log_every=log_every)
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "bench": "engine", "device": dev.to_dict(), "precision": precision,
        "config": {"model": model, "batch_size": batch_size, "seq_len": seq_len,
                   "warmup_steps": warmup, "timed_steps": steps, "repeats": repeats, "compile": compile,
                   "log_every": log_every},
        "results": {k: {"steps_per_s": med[k], "all": samples[k]} for k in ways},
        "ratios": {"wb_vs_raw": med["workbench"] / med["raw"], "wb_vs_trainer": med["workbench"] / med["trainer"],
                   **({"wb_compiled_vs_trainer": med["workbench_compiled"] / med["trainer"]} if compile else {})},
    }


def dashboard(steps: int = 2000, warmup: int | None = None, repeats: int = 5, device: str = "auto") -> dict[str, Any]:
    """A tiny-model run with the live dashboard (a simulated front end that receives every
    message) against the same run headless, side by side."""
    from .catalog import model as as_model
    from .dashboard import Dashboard, RecordingFrontend
    from .data import dataset as as_dataset
    from .device import device as pick
    from .engine import train

    dev = pick(device)
    warmup = warmup if warmup is not None else min(100, steps // 4)
    spec, data = as_model("gpt2", size="tiny"), as_dataset("docstrings-lm")
    fronts: list = []
    timings: list[float] = []  # kernel time per message
    spent: list[float] = []  # time the dashboard took from the training thread, per run
    finals: list[float] = []  # time of the end-of-run update, per run

    def live(run):
        front = RecordingFrontend()
        d = Dashboard(run, mode="live", sink=front)
        front.answer({"type": "ready"})
        flush = d.flush
        spent.append(0.0)

        def timed_flush():
            t = time.perf_counter()
            flush()
            timings.append(time.perf_counter() - t)

        def timed(event):  # the dashboard runs in the training thread: this is its overhead
            t = time.perf_counter()
            d(event)
            if event.get("phase") == "end":  # after training: the last picture and history
                finals.append(time.perf_counter() - t)
            else:
                spent[-1] += time.perf_counter() - t

        d.flush = timed_flush
        run.subscribe(timed)
        fronts.append(front)

    walls: list[float] = []

    def one(display) -> float:
        timer = _timer(dev, warmup, steps)
        with tempfile.TemporaryDirectory() as out:
            run = train(spec, data, max_steps=steps, batch_size=2, max_length=32, device=dev.kind,
                        live=display, run_dir=out, callbacks=[timer])
            if display is not False:
                walls.append(run.summary["wall_time_s"])
        return timer.steps_per_s()

    samples: dict[str, list[float]] = {"headless": [], "live": []}
    for r in range(repeats):
        order = ["headless", "live"] if r % 2 == 0 else ["live", "headless"]
        for name in order:
            samples[name].append(one(live if name == "live" else False))
    med = {k: statistics.median(v) for k, v in samples.items()}
    direct = statistics.median(100 * s / w for s, w in zip(spent, walls))
    deltas = [m for f in fronts for m in f.deltas]
    sizes = [len(json.dumps({"method": "custom", "content": c})) + sum(len(b) for b in bufs) for c, bufs in deltas]
    per_run = len(deltas) / max(len(fronts), 1)
    return {
        "bench": "dashboard", "device": dev.to_dict(),
        "config": {"model": "gpt2-tiny", "steps": steps, "warmup_steps": warmup, "batch_size": 2,
                   "seq_len": 32, "repeats": repeats},
        "results": {k: {"steps_per_s": med[k], "all": samples[k]} for k in samples},
        "messages": {"per_run": per_run, "max_bytes": max(sizes) if sizes else 0,
                     "mean_kernel_ms": 1000 * statistics.mean(timings) if timings else 0,
                     "max_kernel_ms": 1000 * max(timings) if timings else 0,
                     "end_of_run_ms": 1000 * statistics.median(finals) if finals else 0},
        # overhead_pct: the time the live dashboard (events in, messages out, the final
        # history and picture) took from the training thread, as a share of the run's wall
        # time, measured in the live runs themselves. The side-by-side throughput ratio is
        # reported too, but identical runs of a ~10 ms step differ by up to 20% from each
        # other on a shared 2-core machine, which swamps an effect of 1%.
        "ratios": {"overhead_pct": direct, "live_vs_headless": med["live"] / med["headless"]},
    }


def scaling(steps: int = 60, repeats: int = 2, devices: int = 2, device: str = "auto") -> dict[str, Any]:
    """One process against ``devices`` torchrun workers (same per-device batch), tokens/s."""
    import os

    from .catalog import model as as_model
    from .data import dataset as as_dataset
    from .device import device as pick
    from .engine import train
    from .launcher import launch

    dev = pick(device)
    spec, data = as_model("gpt2", size="tiny"), as_dataset("docstrings-lm")
    kw = dict(max_steps=steps, batch_size=8, max_length=64, log_every=5, device=dev.kind, live=False,
              throughput_warmup_steps=10, save_every=10_000)
    samples: dict[str, list[float]] = {"1 process": [], f"{devices} processes": []}
    cwd = os.getcwd()
    for r in range(repeats):
        with tempfile.TemporaryDirectory() as out:
            os.chdir(out)  # torchrun workers resolve the run directory from here
            try:
                for name in (list(samples) if r % 2 == 0 else list(samples)[::-1]):
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
        "bench": "scaling", "device": dev.to_dict(),
        "config": {"model": "gpt2-tiny", "steps": steps, "batch_size_per_process": 8, "seq_len": 64,
                   "devices": devices, "repeats": repeats, "cpu_cores": os.cpu_count()},
        "results": {k: {"tokens_per_s": med[k], "all": samples[k]} for k in samples},
        "ratios": {f"{devices}_vs_1": many / one},
    }


def shapes(steps: int = 30, repeats: int = 3, device: str = "auto", size: str = "tiny") -> dict[str, Any]:
    """Pad-to-max vs dynamic padding vs bucketing vs packing (``workbench.shapes.benchmark``);
    ``size="base"``: BERT-base and GPT-2-124M shapes instead of tiny models."""
    from .shapes import benchmark

    return benchmark(steps=steps, repeats=repeats, device=device, size=size)


def mfu(steps: int = 20, warmup: int = 3, repeats: int = 3, batch_size: int | None = None, seq_len: int = 1024,
        device: str = "auto", precision: str = "auto", model: str = "gpt2-124m",
        compile: bool = False, log_every: int = 10, config: dict | None = None,
        contenders: list[str] | None = None, train_args: dict | None = None) -> dict[str, Any]:
    """Model FLOPs utilisation of a GPT-2-124M-shaped model on packed blocks, side by side:
    the plain Trainer with its defaults (``trainer``) and wb.train (``workbench``; with
    ``compile=True`` also both with torch.compile, ``trainer_compiled`` and
    ``workbench_compiled``), the same blocks and precision for all. MFU and the
    ``workbench_*`` figures are those of the faster wb.train contender.

    FLOPs per token = 6 N + 12 L d S (N parameters without the position table; the
    attention term as in the PaLM paper's appendix). MFU = FLOPs/token x tokens/s / peak;
    on a CPU there is no peak in the table, so only the achieved TFLOP/s is reported.
    Compilation happens in the warm-up steps, which are not timed. Both engines log every
    ``log_every`` steps (a logging step waits for the device to read the loss; 0: each its
    own default, as in ``engine``). ``config`` overrides fields of the model's config (e.g.
    ``{"resid_pdrop": 0}``); ``contenders`` times only some of the contenders (the ``*_vs_trainer`` ratios need ``trainer``);
    ``train_args`` go to ``wb.train`` (so to ``TrainingArguments``), e.g.
    ``{"torch_compile_mode": "max-autotune"}``.
    """
    from .device import device as pick
    from .engine import _precision

    dev = pick(device)
    precision = _precision(dev, precision)
    spec, data = _engine_setup(model, config)
    if spec.task != "causal_lm":
        raise ValueError(f"mfu measures a causal LM on packed blocks; {model!r} is a {spec.task} shape: "
                         f"use one of {', '.join(k for k, v in SHAPES.items() if v[0] == 'gpt2')}")
    if batch_size is None:
        batch_size = 16 if dev.kind != "cpu" else 2
    if dev.kind == "cpu":
        seq_len = min(seq_len, 256)
    cfg = spec.config()
    layers, width = cfg.num_hidden_layers, cfg.hidden_size
    n = spec.num_params - getattr(cfg, "n_positions", getattr(cfg, "max_position_embeddings", 0)) * width
    flops_per_token = 6 * n + 12 * layers * width * seq_len
    ways = {"trainer": functools.partial(_plain_trainer, packed=True),
            "workbench": functools.partial(_workbench, padding="packed", train_args=train_args)}
    if compile:  # the compiled Trainer shows what compile=True adds beyond torch.compile itself
        ways["trainer_compiled"] = functools.partial(_plain_trainer, packed=True, compile=True)
        ways["workbench_compiled"] = functools.partial(_workbench, padding="packed", train_args=train_args,
                                                       compile=True)
    if contenders is not None:
        unknown = sorted(set(contenders) - set(ways))
        if unknown or not contenders:
            raise ValueError(f"unknown ways {unknown}; choose from {', '.join(ways)}"
                             + ("" if compile else " (the *_compiled ways need compile=True)"))
        ways = {k: ways[k] for k in contenders}
    steps_per_s = _interleaved(ways, repeats, spec, data, dev, warmup, steps, batch_size, seq_len, precision,
                               log_every=log_every)
    rates = {k: [v * batch_size * seq_len for v in vals] for k, vals in steps_per_s.items()}
    peak = peak_tflops(dev)
    results, ratios = {}, {}
    for name, all_rates in rates.items():
        tokens_per_s = statistics.median(all_rates)
        achieved = flops_per_token * tokens_per_s
        results[name] = {"tokens_per_s": tokens_per_s, "achieved_tflops": achieved / 1e12, "all": all_rates}
        if peak:
            results[name]["mfu"] = achieved / (peak * 1e12)
    engines = [k for k in results if k != "trainer"]
    if "trainer" in results:
        for name in engines:
            ratios[f"{name}_vs_trainer"] = results[name]["tokens_per_s"] / results["trainer"]["tokens_per_s"]
    if {"trainer_compiled", "workbench_compiled"} <= set(results):
        ratios["workbench_compiled_vs_trainer_compiled"] = (results["workbench_compiled"]["tokens_per_s"]
                                                            / results["trainer_compiled"]["tokens_per_s"])
    best = max((k for k in engines if k.startswith("workbench")), key=lambda k: results[k]["tokens_per_s"],
               default=None)
    figures = {"flops_per_token": flops_per_token}
    if peak:
        figures["peak_tflops"] = peak
    if best is not None:
        figures.update(workbench_tokens_per_s=results[best]["tokens_per_s"],
                       workbench_achieved_tflops=results[best]["achieved_tflops"])
        if peak:
            ratios["mfu"] = results[best]["mfu"]
    return {"bench": "mfu", "device": dev.to_dict(), "precision": precision,
            "config": {"model": model, "params": spec.num_params, "batch_size": batch_size, "seq_len": seq_len,
                       "warmup_steps": warmup, "timed_steps": steps, "repeats": repeats, "compile": compile,
                       "log_every": log_every, "best": best, "config_overrides": dict(config or {}),
                       "train_args": dict(train_args or {})},
            "results": results, "figures": figures, "ratios": ratios}


BENCHES = {"engine": engine, "dashboard": dashboard, "scaling": scaling, "shapes": shapes, "mfu": mfu}
BASELINES = Path("benchmarks") / "baselines"


def save_baseline(result: dict, root: Path = BASELINES, key: str | None = None) -> Path:
    """Keep ``result`` as this device's baseline for its benchmark (one JSON per device),
    under ``key`` (default: the benchmark's name; name others, e.g. ``engine-bert-base``,
    to keep several configurations of one benchmark side by side)."""
    dev = result["device"]
    name = "".join(c if c.isalnum() else "-" for c in f"{dev['kind']}-{dev.get('generation') or dev['name']}").lower()
    path = root / f"{name}.json"
    root.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key or result["bench"]] = {"config": result["config"], "ratios": result["ratios"],
                             "figures": result.get("figures", {}),
                             "results": {k: {m: v for m, v in r.items() if m != "all"} for k, r in result["results"].items()}}
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    return path


def _table(result: dict) -> str:
    lines = [f"{result['bench']} on {result['device']['kind']} ({result['device']['name']}), {result.get('precision', '')}"]
    for name, r in result["results"].items():
        figures = ", ".join(f"{k} {v:.4g}" for k, v in r.items() if isinstance(v, (int, float)))
        lines.append(f"  {name:<12} {figures}")
    for key in ("messages", "figures"):
        if key in result:
            lines.append(f"  {key}: " + ", ".join(f"{k} {v:.4g}" for k, v in result[key].items()))
    lines.append("  ratios: " + ", ".join(f"{k} {v:.3f}" for k, v in result["ratios"].items()))
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m workbench.bench``."""
    p = argparse.ArgumentParser(prog="python -m workbench.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bench", choices=sorted(BENCHES))
    p.add_argument("--from-json", type=Path, metavar="FILE",
                   help="do not run: print (and --save-baseline) a result saved earlier with --json")
    p.add_argument("--json", type=Path, help="write the result here")
    p.add_argument("--device", default="auto")
    p.add_argument("--steps", type=int, help="timed steps per repeat")
    p.add_argument("--repeats", type=int, help="interleaved rounds")
    p.add_argument("--model", help="model shape for engine and mfu: " + ", ".join(SHAPES))
    p.add_argument("--batch-size", type=int)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--precision", help="auto, fp32, bf16, fp16 (engine, mfu)")
    p.add_argument("--compile", action="store_true", help="also time wb.train with torch.compile (engine, mfu)")
    p.add_argument("--log-every", type=int,
                   help="logging cadence of the Trainer and wb.train (engine, mfu; default 10); "
                        "0: each engine's own default")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="override a field of the model's config (mfu; repeatable), e.g. resid_pdrop=0")
    p.add_argument("--size", choices=("tiny", "base"),
                   help="shapes: tiny models (default) or BERT-base and GPT-2-124M shapes")
    p.add_argument("--ways", help="mfu: comma-separated contenders to time, e.g. workbench_compiled")
    p.add_argument("--train-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="mfu: a wb.train / TrainingArguments field for wb.train (repeatable), "
                        "e.g. torch_compile_mode=max-autotune")
    p.add_argument("--save-baseline", nargs="?", const="", metavar="KEY",
                   help="record as benchmarks/baselines/<device>.json (under KEY, default the bench's name)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if (args.config or args.ways or args.train_arg) and args.bench != "mfu":
        p.error("--config, --ways and --train-arg apply to the mfu benchmark only")
    if args.size and args.bench != "shapes":
        p.error("--size applies to the shapes benchmark only")
    kwargs = {"device": args.device}
    for key in ("model", "batch_size", "seq_len", "precision", "log_every"):
        if getattr(args, key) is not None:
            kwargs[key] = getattr(args, key)
    if args.compile:
        kwargs["compile"] = True
    for option, key in (("config", "config"), ("train_arg", "train_args")):
        pairs = getattr(args, option)
        if bad := [c for c in pairs if "=" not in c]:
            p.error(f"--{option.replace('_', '-')} takes KEY=VALUE, got {bad[0]!r}")
        if pairs:
            kwargs[key] = {k: _config_value(v) for k, v in (c.split("=", 1) for c in pairs)}
    if args.size:
        kwargs["size"] = args.size
    if args.ways:
        kwargs["contenders"] = [w.strip() for w in args.ways.split(",") if w.strip()]
    if args.steps:
        kwargs["steps"] = args.steps
    if args.repeats:
        kwargs["repeats"] = args.repeats
    if args.from_json:  # e.g. results brought back from a machine with an accelerator
        result = json.loads(args.from_json.read_text())
        if result.get("bench") != args.bench:
            raise SystemExit(f"{args.from_json} holds a {result.get('bench')!r} result, not {args.bench!r}")
    else:
        result = BENCHES[args.bench](**kwargs)
    print(_table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    if args.save_baseline is not None:
        print(f"baseline: {save_baseline(result, key=args.save_baseline or None)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
