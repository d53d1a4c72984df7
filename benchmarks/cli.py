"""Benchmarks that measure ratios side by side in one process.

    python -m benchmarks engine --json out.json

Each benchmark warms up, synchronises the device before reading the clock, repeats the
contenders in interleaved rounds (so that a noisy neighbour slows all of them alike) and
reports medians and their ratios. The JSON has ``results`` and ``ratios``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path

from . import (
    attachment,
    dashboard,
    engine,
    gaudicounts,
    mfu,
    plan,
    prompts,
    scaling,
    sdcache,
    shapes,
)
from .contenders import SHAPES

# each benchmark is a module with a ``run`` function; the command line names them so
BENCHES = {
    "attachment": attachment.run,
    "engine": engine.run,
    "gaudi-counts": gaudicounts.run,
    "dashboard": dashboard.run,
    "scaling": scaling.run,
    "shapes": shapes.run,
    "mfu": mfu.run,
    "plan": plan.run,
    "prompts": prompts.run,
    "sdcache": sdcache.run,
}
BASELINES = Path("benchmarks") / "baselines"
# the benchmarks that warm their contenders up (a ``warmup`` argument)
WARMUP_BENCHES = tuple(
    name for name, bench in BENCHES.items() if "warmup" in inspect.signature(bench).parameters
)


def save_baseline(result: dict, root: Path = BASELINES, key: str | None = None) -> Path:
    """Keep ``result`` as this device's baseline for its benchmark (one JSON per device),
    under ``key`` (default: the benchmark's name; name others, e.g. ``engine-bert-base``,
    to keep several configurations of one benchmark side by side)."""
    dev = result["device"]
    name = "".join(
        c if c.isalnum() else "-" for c in f"{dev['kind']}-{dev.get('generation') or dev['name']}"
    ).lower()
    path = root / f"{name}.json"
    root.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key or result["bench"]] = {
        "config": result["config"],
        "ratios": result["ratios"],
        "figures": result.get("figures", {}),
        "results": {
            k: {m: v for m, v in r.items() if m != "all"} for k, r in result["results"].items()
        },
    }
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    return path


def _table(result: dict) -> str:
    if "table" in result:  # a benchmark that counts rather than times (gaudi-counts)
        return f"{result['bench']} on {result['device']['name']}\n{result['table']}"
    lines = [
        f"{result['bench']} on {result['device']['kind']} ({result['device']['name']}), "
        f"{result.get('precision', '')}"
    ]
    for name, r in result["results"].items():
        figures = ", ".join(f"{k} {v:.4g}" for k, v in r.items() if isinstance(v, (int, float)))
        lines.append(f"  {name:<12} {figures}")
    for key in ("messages", "figures"):
        if key in result:
            lines.append(f"  {key}: " + ", ".join(f"{k} {v:.4g}" for k, v in result[key].items()))
    lines.append("  ratios: " + ", ".join(f"{k} {v:.3f}" for k, v in result["ratios"].items()))
    return "\n".join(lines)


def _config_value(text: str):
    """A ``--config KEY=VALUE`` value: a JSON number, boolean or null, else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks``."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("bench", choices=sorted(BENCHES))
    p.add_argument(
        "--from-json",
        type=Path,
        metavar="FILE",
        help="do not run: print (and --save-baseline) a result saved earlier with --json",
    )
    p.add_argument("--json", type=Path, help="write the result here")
    p.add_argument("--device", default="auto")
    p.add_argument("--steps", type=int, help="timed steps per repeat")
    p.add_argument("--repeats", type=int, help="interleaved rounds")
    p.add_argument(
        "--warmup",
        type=int,
        help="untimed steps per contender and round (" + ", ".join(WARMUP_BENCHES) + ")",
    )
    p.add_argument("--model", help="model shape for engine and mfu: " + ", ".join(SHAPES))
    p.add_argument("--batch-size", type=int)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--precision", help="auto, fp32, bf16, fp16 (engine, mfu)")
    p.add_argument(
        "--compile", action="store_true", help="also time wb.train with torch.compile (engine, mfu)"
    )
    p.add_argument(
        "--log-every",
        type=int,
        help="logging cadence of the Trainer and wb.train (engine, mfu; default 10); "
        "0: each engine's own default",
    )
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field of the model's config (mfu; repeatable), e.g. resid_pdrop=0",
    )
    p.add_argument(
        "--size",
        choices=("tiny", "base"),
        help="shapes: tiny models (default) or BERT-base and GPT-2-124M shapes",
    )
    p.add_argument(
        "--ways", help="mfu: comma-separated contenders to time, e.g. workbench_compiled"
    )
    p.add_argument(
        "--train-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="mfu: a wb.train / TrainingArguments field for wb.train (repeatable), "
        "e.g. torch_compile_mode=max-autotune",
    )
    p.add_argument(
        "--run",
        type=Path,
        metavar="RUN_DIR",
        help="prompts: score this text-to-image run (its last checkpoint) instead of training one",
    )
    p.add_argument("--per-digit", type=int, help="prompts: samples per digit's prompt (default 20)")
    p.add_argument(
        "--sample-steps", type=int, help="prompts: sampling (DDIM) steps per image (default 25)"
    )
    p.add_argument(
        "--save-baseline",
        nargs="?",
        const="",
        metavar="KEY",
        help="record as benchmarks/baselines/<device>.json (under KEY, default the bench's name)",
    )
    return p


def _kwargs(p: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    """The benchmark function's keyword arguments from the parsed command line."""
    if (args.config or args.ways or args.train_arg) and args.bench != "mfu":
        p.error("--config, --ways and --train-arg apply to the mfu benchmark only")
    if args.size and args.bench != "shapes":
        p.error("--size applies to the shapes benchmark only")
    if (args.run or args.per_digit or args.sample_steps) and args.bench != "prompts":
        p.error("--run, --per-digit and --sample-steps apply to the prompts benchmark only")
    if args.run and (args.steps or args.repeats or args.batch_size):
        p.error(
            "--run scores a trained run: --steps, --repeats and --batch-size would train one "
            "(--sample-steps sets the sampling steps)"
        )
    if args.warmup is not None and args.bench not in WARMUP_BENCHES:
        p.error(f"--warmup applies to {', '.join(WARMUP_BENCHES)}, not {args.bench}")
    kwargs = {"device": args.device}
    for key in (
        "model",
        "batch_size",
        "seq_len",
        "precision",
        "log_every",
        "size",
        "warmup",
        "run",
        "per_digit",
        "sample_steps",
    ):
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
    if args.ways:
        kwargs["contenders"] = [w.strip() for w in args.ways.split(",") if w.strip()]
    for key in ("steps", "repeats"):  # 0 or absent: the benchmark's default
        if getattr(args, key):
            kwargs[key] = getattr(args, key)
    takes = inspect.signature(BENCHES[args.bench]).parameters
    if "seq_len" in kwargs and "seq_len" not in takes and "max_length" in takes:
        kwargs["max_length"] = kwargs.pop("seq_len")  # the shapes benchmark's name for it
    open_ended = any(v.kind is inspect.Parameter.VAR_KEYWORD for v in takes.values())
    if unknown := [k for k in kwargs if k not in takes and not open_ended]:
        p.error(
            f"{', '.join('--' + k.replace('_', '-') for k in unknown)} does not apply to the "
            f"{args.bench} benchmark"
        )
    return kwargs


def main(argv: list[str] | None = None) -> int:
    """Run (or, with ``--from-json``, load) one benchmark; print its table; save as asked."""
    p = parser()
    args = p.parse_args(argv)
    kwargs = _kwargs(p, args)
    if args.from_json:  # e.g. results brought back from a machine with an accelerator
        result = json.loads(args.from_json.read_text())
        if result.get("bench") != args.bench:
            raise SystemExit(
                f"{args.from_json} holds a {result.get('bench')!r} result, not {args.bench!r}"
            )
    else:
        result = BENCHES[args.bench](**kwargs)
    print(_table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    if args.save_baseline is not None:
        print(f"baseline: {save_baseline(result, key=args.save_baseline or None)}", file=sys.stderr)
    return 0
