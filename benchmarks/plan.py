"""Does ``wb.plan`` predict? Two checks of the planner against measurements.

* **fit**: on this machine, a plan fitted from one run of a model (its achieved FLOP/s)
  predicts the tokens/s of runs of the same model at other batch sizes and sequence
  lengths. Each setting is trained for real with ``wb.train`` (packed blocks, medians after
  warm-up) and compared with the prediction fitted in the same round (a busy neighbour
  slows both alike); rounds rotate the order; the error is the median over rounds.
* **references**: with only published references (this project's own measurements left
  out), the planner's estimate for each run this project measured (``kind: measured`` in
  ``assets/plan_references.json``) beside what was measured. Arithmetic only: no device.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from workbench.backends.registry import device as pick
from workbench.planning.planner import plan as make_plan
from workbench.planning.references import references
from workbench.training.engine import train

from .contenders import SHAPES, engine_setup, rotated


def _settings(batch_size: int, seq_len: int) -> dict[str, tuple[int, int]]:
    """The fitted setting and the ones predicted from it: batch and length halved and doubled."""
    return {
        "fit": (batch_size, seq_len),
        "half_batch": (max(1, batch_size // 2), seq_len),
        "double_batch": (batch_size * 2, seq_len),
        "half_seq": (batch_size, max(16, seq_len // 2)),
        "double_seq": (batch_size, seq_len * 2),
    }


def _references_only() -> dict[str, Any]:
    """The planner's estimate, from published references only, of each project-measured run."""
    data = references()
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        published = Path(tmp) / "published.json"
        published.write_text(
            json.dumps({**data, "mfu": [e for e in data["mfu"] if e["kind"] == "published"]})
        )
        for e in (e for e in data["mfu"] if e["kind"] == "measured"):
            p = make_plan(
                e["catalog"],
                tokens=10**9,
                batch_size=e["batch_size"],
                seq_len=e["seq_len"],
                precision=e["precision"],
                devices=[e["chip"]],
                runs=tmp,
                references=published,
            )
            row = p.rows[0]
            out[f"{e['chip']} {e['model']}"] = {
                "measured_tokens_per_s": e["tokens_per_s"],
                "estimate_tokens_per_s": row["tokens_per_s_device"],
                "error_pct": 100 * (row["tokens_per_s_device"] / e["tokens_per_s"] - 1),
                "estimate_mfu": row["mfu"],
                "estimate_from": row["sources"]["mfu"],
                # a figure from another chip of the same peak: its HBM bandwidth's speed-up
                "estimate_bandwidth": row["sources"].get("bandwidth", ""),
            }
    return out


def run(
    steps: int = 30,
    repeats: int = 2,
    batch_size: int | None = None,
    seq_len: int | None = None,
    device: str = "auto",
    model: str = "gpt2-mini",
) -> dict[str, Any]:
    """Prediction error of a plan fitted from one run (see the module's docstring)."""
    dev = pick(device)
    if SHAPES.get(model, ("",))[0] != "gpt2":
        raise ValueError(
            f"the plan benchmark trains a causal LM on packed blocks; choose one of "
            f"{', '.join(k for k, v in SHAPES.items() if v[0] == 'gpt2')}"
        )
    spec, data = engine_setup(model)
    batch_size = batch_size or 8
    seq_len = seq_len or 128
    settings = _settings(batch_size, seq_len)
    kw = dict(
        max_steps=steps,
        log_every=1,
        device=dev.kind,
        live=False,
        padding="packed",
        throughput_warmup_steps=5,
        save_every=10_000,
    )
    measured: dict[str, list[float]] = {k: [] for k in settings}
    predicted: dict[str, list[float]] = {k: [] for k in settings if k != "fit"}
    for r in range(repeats):
        with tempfile.TemporaryDirectory() as out:
            roots = {k: Path(out) / k for k in settings}
            for name in rotated(list(settings), r):
                b, s = settings[name]
                run = train(spec, data, run_dir=roots[name], batch_size=b, max_length=s, **kw)
                measured[name].append(run.summary["tokens_per_s"])
            for name in predicted:  # fitted from this round's one fit run
                b, s = settings[name]
                p = make_plan(
                    spec,
                    tokens=10**6,
                    batch_size=b,
                    seq_len=s,
                    devices=["detected"],
                    runs=roots["fit"],
                )
                predicted[name].append(p.rows[0]["tokens_per_s_device"])
    results = {}
    for name, (b, s) in settings.items():
        results[name] = {
            "batch_size": b,
            "seq_len": s,
            "tokens_per_s": statistics.median(measured[name]),
            "all": measured[name],
        }
        if name in predicted:  # each round's prediction against that round's measurement
            rounds = [
                100 * (p / m - 1) for p, m in zip(predicted[name], measured[name], strict=True)
            ]
            results[name].update(
                predicted_tokens_per_s=statistics.median(predicted[name]),
                error_pct=statistics.median(rounds),
                errors_pct=rounds,
            )
    errors = [abs(r["error_pct"]) for r in results.values() if "error_pct" in r]
    ratios = {f"predicted_vs_measured_{k}": 1 + results[k]["error_pct"] / 100 for k in predicted}
    return {
        "bench": "plan",
        "device": dev.to_dict(),
        "precision": dev.precision,
        "config": {
            "model": model,
            "params": spec.num_params,
            "steps": steps,
            "repeats": repeats,
            "settings": {k: list(v) for k, v in settings.items()},
        },
        "results": results,
        "ratios": ratios,
        "figures": {
            "max_abs_error_pct": max(errors),
            "median_abs_error_pct": statistics.median(errors),
        },
        "references_only": _references_only(),
    }
