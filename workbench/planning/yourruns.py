"""Your own completed runs, as the planner learns from them: each read as data (its model
from the local cache or the catalog, never its code), and the achieved FLOP/s of the runs
nearest in size on a chip."""

from __future__ import annotations

import functools
import json
import math
import os
import statistics
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from ..backends.registry import DeviceInfo, chip
from ..catalog import hub
from ..catalog.modelspec import MINILM, ModelSpec, is_local
from ..rundir.run import RunDir
from ..settings import runs_root
from .flops import flops_per_token
from .matching import SIMILAR


@functools.lru_cache(maxsize=256)
def _figures(spec_json: str, seq: int) -> tuple[str, int, int]:
    """(name, parameters, FLOPs a token) of a run's model: many runs share one spec.
    ``spec_json`` is ``_local_model``'s, never a run's file as it stands."""
    mspec = ModelSpec.from_dict(json.loads(spec_json))
    return mspec.name, mspec.num_params, flops_per_token(mspec, seq)


def _local_model(run: RunDir) -> ModelSpec | None:
    """A run's model as the planner may read it: data only. Its ``trust_remote_code`` is the
    planner's own (off: ``RunDir.model_spec``), whatever spec.json says, so no Python file
    that its configs name is imported; a hub id is read from the local cache's snapshot or
    the run is skipped (None): learning from your runs never reaches the network."""
    mspec = run.model_spec(trust_remote_code=False)
    # what ModelSpec.config() reads: a catalog size is built offline from the catalog (a tiny
    # one with its tokenizer); any other size from its source's config
    catalog = mspec.size in mspec.info["sizes"] or mspec.size == MINILM
    read = ["tokenizer"] if mspec.size == "tiny" and not mspec.source else []
    read += [] if catalog else ["source"]
    local = {}
    for name in read:
        value = getattr(mspec, name)
        if not value or is_local(value):
            continue
        cached = hub.cached_dir(value)
        if cached is None:
            return None
        local[name] = cached
    return replace(mspec, **local)


def _run_record(path: Path) -> dict[str, Any] | None:
    """A completed run as (chip, precision, parameters, achieved FLOP/s per device); None if
    unusable."""
    run = RunDir(path)
    summary = run.summary
    try:
        spec = run.spec
    except ValueError:  # a spec.json of the wrong shape: not a run to learn from
        return None
    tokens_per_s, seq = summary.get("tokens_per_s"), spec.args.max_length
    if run.status != "completed" or not tokens_per_s or not seq:
        return None
    dev = summary.get("device") or {}
    info = DeviceInfo(**{f.name: dev[f.name] for f in fields(DeviceInfo) if f.name in dev})
    found = chip(info)
    if found is None:
        return None
    try:
        mspec = _local_model(run)
        if mspec is None:
            return None
        name, params, per_token = _figures(mspec.to_json(), int(seq))
    except (ValueError, TypeError, KeyError, OSError, ImportError):
        return None  # a UNet, a model that needs its own code, or one this version cannot read
    devices = spec.launch.devices if spec.launch is not None else 1
    precision = spec.args.precision
    return {
        "run": run.name,
        "chip": found.name,
        "precision": info.precision if precision == "auto" else precision,
        "params": params,
        "model": name,
        "tokens_per_s": float(tokens_per_s),
        "seq_len": int(seq),
        "batch_size": spec.args.batch_size,
        "achieved": per_token * float(tokens_per_s) / devices,
    }


def your_runs(root: str | Path | None = None) -> list[dict[str, Any]]:
    """Every completed run under ``root`` (default ``./runs``; ``os.devnull``: none) that the
    planner can learn from. A ``root`` given that is not a directory is refused (the default
    may be missing: no runs yet)."""
    if root is not None and str(root) != os.devnull and not Path(root).expanduser().is_dir():
        why = "is a file, not a directory" if Path(root).expanduser().exists() else "does not exist"
        raise ValueError(
            f"runs={str(root)!r} {why}, so no runs could be read: pass runs= the directory "
            f"your run directories are in (wb.train's run_dir), leave it out for the default "
            f"(./runs, or $WORKBENCH_RUNS), or pass runs=os.devnull to plan without runs"
        )
    found = (_run_record(p.parent) for p in sorted(runs_root(root).glob("*/spec.json")))
    return [r for r in found if r is not None]


def from_runs(runs: list[dict], chip_name: str, precision: str, params: int) -> dict | None:
    """Achieved FLOP/s per device fitted from the runs on ``chip_name`` nearest in size (median)."""
    near = [
        r
        for r in runs
        if r["chip"] == chip_name
        and r["precision"] == precision
        and abs(math.log(r["params"] / params)) <= math.log(SIMILAR)
    ]
    if not near:
        return None
    best = min(abs(math.log(r["params"] / params)) for r in near)
    chosen = [r for r in near if abs(math.log(r["params"] / params)) == best]
    names = ", ".join(r["run"] for r in chosen[:3]) + (
        f" and {len(chosen) - 3} more" if len(chosen) > 3 else ""
    )
    return {
        "achieved": statistics.median(r["achieved"] for r in chosen),
        "kind": "your runs",
        "source": f"fitted from {len(chosen)} of your completed run(s) of {chosen[0]['model']} on "
        f"{chip_name}, {precision}: {names}",
    }
