"""``wb.plan``: how long, and what it costs, to train a model on a number of tokens on each
device, with the source of every figure.

Per device (Gaudi 2, Gaudi 3, A100 80 GB, H100 SXM, H200 and this machine):

* **memory and layout** from ``wb.plan_memory`` and ``layout.best``: for the device count
  (``num_devices``, else the cheapest per token from the fewest that hold a step), the
  fastest layout that fits: data parallel, ZeRO 1/2/3, Megatron's tensor x pipeline
  parallel, gradient checkpointing only where memory needs it, with what each costs in
  communication on the chip's own links;
* **throughput** = MFU x the chip's dense peak at the run's precision (``backends.chips.CHIPS``) /
  the FLOPs of a token (``flops.flops_per_token``, the count the MFU benchmark uses; for a
  UNet the FLOPs of an image, ``flops.flops_per_sample``, and ``tokens`` counts images). The
  MFU comes, in this order, from your ``mfu=`` argument; your own completed runs of a model
  of similar size on that chip (``runs=``, default ``./runs``); a published or
  project-measured reference (``assets/plan_references.json``: among the chip's entries, else
  those of a chip with the same peak, the nearest in architecture, LoRA, then size and
  FLOP mix, the attention's share); a stated default. On a CPU,
  which has no peak in the table, only your runs give a throughput (their achieved FLOP/s).
  A figure from another chip of the same peak (H100's for an H200) runs the step's
  memory-bound share at this chip's HBM bandwidth. Each figure is scaled from its own
  device count to the row's (``efficiency``: Gaudi's published one-to-eight inside a
  server, 64-over-8 past one);
* **time** = the chip's warm-up (``warmup``: graph compilation on a Gaudi, from its published
  runs' time beyond their steady rate) + tokens / throughput; **cost** = hours x devices x
  the device-hour price (``assets/plan_prices.json``, or yours: ``prices=``), each with the
  range the planner's measured error on published results of the chip's family gives
  (``plan_accuracy``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from ..backends.chips import CHIPS
from ..backends.registry import PRECISIONS, chip, device
from ..catalog.modelspec import ModelSpec
from ..catalog.modelspec import model as as_model
from . import layout, strategies
from . import references as refs
from .flops import UNETS, flops_per_sample, flops_per_token
from .matching import (
    carried,
    kind_of,
    nearest_reference,
    own_overhead,
    scaling_factor,
    scaling_source,
)
from .memory import plan_memory
from .trainingplan import TrainingPlan
from .warmup import warmup_of
from .yourruns import from_runs, your_runs

DEFAULT_DEVICES = ("Gaudi2", "Gaudi3", "A100 80GB", "H100 SXM", "H200", "detected")
MAX_DEVICES = 4096
PLAN_PRECISIONS = (
    *PRECISIONS,
    "fp8",
)  # fp8: a planning precision (the chips' fp8 peaks); wb.train runs bf16


# --------------------------------------------------------------------------- inputs
def _positive(name: str, value, kind: type = int) -> Any:
    ok = isinstance(value, (int, float)) if kind is float else isinstance(value, int)
    if (
        isinstance(value, bool)
        or not ok
        or not value > 0
        or (kind is float and not math.isfinite(value))
    ):
        raise ValueError(
            f"{name} must be a positive {'number' if kind is float else 'integer'}, got {value!r}"
        )
    return value


def _rows_asked(devices) -> list[str]:
    """Chip names (and ``"detected"``) for ``devices``; an unknown name lists the valid ones."""
    if devices is None:
        return list(DEFAULT_DEVICES)
    if isinstance(devices, str):
        devices = [devices]
    if isinstance(devices, int | float):  # wb.plan_memory's devices is a count; here, rows
        raise ValueError(
            f"devices: the chips to plan, e.g. devices=['Gaudi2', 'H100'], got {devices!r}; "
            f"for how many devices a plan may use, pass num_devices={devices!r}"
        )
    out = []
    for name in devices:
        key = (
            "detected"
            if str(name).lower() in ("detected", "this machine")
            else refs.chip_name(str(name), "devices")
        )
        if key not in out:
            out.append(key)
    if not out:
        raise ValueError(
            f"devices: pass at least one of {', '.join(refs.PLANNED)}, 'detected' "
            "(or None for the default set)"
        )
    return out


def _mfu_asked(mfu) -> dict[str, float]:
    """``mfu=``: one number for every device, or a dict of device name -> MFU."""
    if mfu is None:
        return {}
    items = mfu.items() if isinstance(mfu, dict) else [("*", mfu)]
    out = {}
    for name, value in items:
        key = name if name in ("*", "detected") else refs.chip_name(str(name), "mfu")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise ValueError(
                f"mfu: the MFU of {name!r} must be a fraction in (0, 1], e.g. 0.35, got {value!r}"
            )
        out[key] = float(value)
    return out


# --------------------------------------------------------------------------- references
def _mfu_for(
    found, precision: str, run: dict, asked: dict, runs: list, data: dict, key: str
) -> dict | None:
    """Achieved FLOP/s per device and where it came from, by the planner's order; None if
    unknown."""
    peak = found.tflops.get(precision) if found is not None else None
    if key in asked or ("*" in asked and key != "detected"):
        if peak:
            mfu = asked.get(key, asked.get("*"))
            return {
                "achieved": mfu * peak * 1e12,
                "kind": "your mfu",
                "source": f"your mfu={mfu:g} argument",
            }
    fitted = from_runs(runs, found.name, precision, run["params"]) if found is not None else None
    if fitted is not None:
        return fitted
    if not peak:
        return None
    ref = nearest_reference(data, found, precision, run)
    if ref is None:
        d = data["default"]
        ref = {
            "mfu": d["mfu"],
            "kind": "default",
            "source": f"default MFU {d['mfu']:g}: {d['measures']}",
        }
    return {"achieved": ref["mfu"] * peak * 1e12, **ref}


# --------------------------------------------------------------------------- layout
def _choose(
    mp, target, found, asked, per_unit, achieved, trainable, scaling, ckpt, stack, global_batch
) -> tuple:
    """(the chosen ``layout.best`` result, a note): on ``asked`` devices when given and they
    hold a step, else on the fewest that do; without ``asked``, the cheapest count per token
    from the fewest that hold a step up to 8x as many (the fewer on a tie)."""

    def at(n):
        return layout.best(
            mp, target, n, found, per_unit, achieved, trainable, ckpt, stack, global_batch
        )

    def per_device(pick):  # tokens/s per device, up to the constant achieved/per_unit
        return pick["timing"]["units"] / pick["timing"]["step"] * scaling(pick["layout"].devices)

    if asked:
        pick = at(asked)
        if pick is not None:
            return pick, ""
    counts = [n for n in (2**k for k in range(13)) if n <= MAX_DEVICES and (not asked or n > asked)]
    fewest = next(((n, p) for n in counts if (p := at(n)) is not None), None)
    if fewest is None:
        return None, f"does not fit even over {MAX_DEVICES} devices under {stack.title}" + (
            ""
            if stack.name == "fastest"
            else ": try a stack that shards the weights (zero3, fsdp, megatron) or strategy=None"
        )
    n, pick = fewest
    if asked:
        return pick, f"num_devices={asked} do not hold a step: planned on {n}, the fewest that do"
    for more in (2 * n, 4 * n, 8 * n):
        other = at(more) if more <= MAX_DEVICES else None
        if other is not None and per_device(other) > 1.001 * per_device(pick):
            pick = other
    return pick, ""


def _error_band(data: dict, found) -> tuple[float, float, str, float | None]:
    """(low, high, why, level): the interval that holds 80% (the recorded level) of ``wb.plan``'s
    leave-one-out errors on published results of this chip's family (``accuracy.intervals``;
    pooled over every family where one has too few), with its coverage measured on held-out
    results and on the leave-one-out ones, each without itself: the time of a run lies between
    hours x (1 + low) and hours x (1 + high) that often (error = planned / published tokens/s
    - 1, so the true time is the planned x (1 + error)). A references file without intervals:
    no range (level None), said so."""
    family = refs.family_of(found.name) if found is not None else "other"
    record = data.get("accuracy") or {}
    band = (record.get("intervals") or {}).get(family)
    if band:
        level = record["intervals"]["level"]
        covered = (
            f"; it held {band['coverage']:.0%} of {band['held_out']} held-out results"
            if band.get("coverage") is not None
            else "; no held-out result to measure its coverage"
        ) + (
            f" and {band['leave_one_out_coverage']:.0%} of the leave-one-out ones, each left out"
            " of its own interval"
            if band.get("leave_one_out_coverage") is not None
            else ""
        )
        why = (
            f"{family}: the {level:.0%} interval of wb.plan's error, {band['low']:+.0%} to "
            f"{band['high']:+.0%}, from the {band['from']} (wb.plan_accuracy(summary=True))"
            + covered
        )
        return band["low"], band["high"], why, level
    return 0.0, 0.0, f"no measured error for {family}: no range", None


# --------------------------------------------------------------------------- one row
def _target(key: str):
    """(the chip record, what ``MemoryPlan.fits`` takes, title) of a row."""
    if key != "detected":
        return CHIPS[key], key, CHIPS[key].title
    info = device()
    return chip(info), info, f"this machine: {info.kind} ({info.name})"


def _day(text: str | None) -> str | None:
    """The YYYY-MM-DD in a price's date (``"repository snapshot 07efbd0, 2025-02-28 (...)"``)."""
    found = re.search(r"\d{4}-\d{2}-\d{2}", text or "")
    return found.group() if found else text


PLACEHOLDER = 1e14  # FLOP/s that rank layouts where no throughput is known (their order only)


def _row(key: str, spec, mp, tokens: int, per_token: int | None, precision: str, ctx: dict) -> dict:
    """One device's row: memory, layout, throughput, time, cost and their sources
    (``tokens`` and ``per_token``: images and FLOPs an image for a UNet)."""
    found, target, title = _target(key)
    prec = precision if key != "detected" or ctx["requested"] != "auto" else device().precision
    row = {"device": key, "name": title, "precision": prec, "fits_one": mp.fits(target)}
    sources = {"memory": "wb.plan_memory (weights, gradients, AdamW state, activations, margin)"}
    got = None
    if per_token is not None:
        got = _mfu_for(
            found,
            prec,
            kind_of(spec, mp.seq_len),
            ctx["mfu"],
            ctx["runs"],
            ctx["refs"],
            key,
        )
    # an MFU measured with checkpointing already paid for the recompute, and a reference's for
    # its own run's communication and bubble (own_overhead): the rate without them
    achieved = (
        got["achieved"] / layout.full_recompute(got.get("checkpointing"))
        if got is not None
        else PLACEHOLDER
    )
    achieved *= own_overhead(got, prec, achieved) if got is not None else 1.0
    trainable = mp._dims.get("trainable", mp.num_params)

    def scaling(n: int) -> float:
        return scaling_factor(ctx["refs"], found, n, got)

    pick, note = _choose(
        mp,
        target,
        found,
        ctx["num_devices"],
        per_token or 1.0,
        achieved,
        trainable,
        scaling,
        ctx.get("checkpointing"),
        ctx["stack"],
        ctx["global_batch"],
    )
    if pick is None:
        return {**row, "note": note, "sources": sources}
    lay, n, t = pick["layout"], pick["layout"].devices, pick["timing"]
    if note:
        row["note"] = note
    row.update(
        devices=n,
        stack=strategies.taken(ctx["stack"], lay),
        strategy=strategies.describe(ctx["stack"], lay),
        launch=strategies.launch(ctx["stack"], lay),
        tensor_parallel=lay.tensor,
        pipeline_parallel=lay.pipeline,
        context_parallel=lay.context,
        memory_gib=round(pick["memory"].per_device / 2**30, 2),
    )
    sources["layout"] = (
        f"layout.best under {ctx['stack'].title}: the fastest layout of this many devices "
        "that fits and that the stack runs (data parallel, ZeRO 1-3, tensor x pipeline x "
        "context parallel, checkpointing only where memory or the recipe needs it); step = "
        + ", ".join(f"{k} {t[k]:.3g} s" for k in layout.STEP if t[k])
    )
    if per_token is None:
        return {**row, "note": ctx["why_no_flops"], "sources": sources}
    if got is None:
        why = (
            f"no throughput: {found.name if found else title} has no {prec} peak in the chip "
            "table (workbench/backends/chips.py) and you have no completed run of a model of "
            "similar size on it (train one, and plan again)"
        )
        return {**row, "note": why, "sources": sources}
    peak = found.tflops.get(prec) if found is not None else None
    speedup, why_bw = (
        carried(got, found, mp, per_token, peak, prec) if found is not None else (1.0, "")
    )
    per_device = t["units"] / t["step"] * speedup
    total = per_device * n * scaling(n)
    warm = warmup_of(ctx["refs"], found)
    hours = (warm["seconds"] + tokens / total) / 3600
    count = (
        f"flops_per_sample: {'2' if spec.lora is not None else '3'} x the UNet's forward (counted "
        f"on the meta device) = {per_token:.4g} FLOPs an image"
        if spec.family in UNETS
        else f"flops_per_token: 6N + 12·L·d·S = {per_token:.4g} FLOPs a token"
    )
    sources.update(
        flops=count,
        peak=f"chip table: {peak:g} TFLOP/s dense {prec}" if peak else "no peak: a CPU",
        mfu=got["source"],
    )
    if why_bw:
        sources["bandwidth"] = why_bw
    if warm["source"]:
        sources["warmup"] = warm["source"]
    if scaling(n) != 1.0:
        sources["scaling"] = scaling_source(ctx["refs"], found, n, got, scaling(n))
    if lay.checkpointing or got.get("checkpointing") is True:
        sources["recompute"] = (
            f"gradient checkpointing recomputes the forward pass (6N of 8N FLOPs): "
            f"{'needed here' if lay.checkpointing else 'not needed here'}"
            f"{', already in the reference' if got.get('checkpointing') is True else ''}"
        )
    if lay.selective:
        sources["recompute"] = "selective recompute: the attention core's forward, 4·L·d·S a token"

    low, high, why_range, level = _error_band(ctx["refs"], found)
    row.update(
        tokens_per_s_device=per_device,
        tokens_per_s=total,
        mfu=per_device * per_token / (peak * 1e12) if peak else None,
        mfu_from=got["kind"],
        # the reference model's parameters over this one's (None: not a reference's figure)
        mfu_size_ratio=got.get("size_ratio"),
        warmup_s=warm["seconds"],
        hours=hours,
        hours_low=hours * (1 + low),
        hours_high=hours * (1 + high),
        range_level=level,
    )
    sources["range"] = why_range + (
        ". This row's MFU is the stated default: an assumption, which no measured error covers"
        if got["kind"] == "default"
        else ""
    )
    price = ctx["prices"].get(key)
    if price is not None:
        usd = price["usd_per_device_hour"]
        cost = hours * n * usd
        row.update(
            usd_per_device_hour=usd,
            cost_usd=cost,
            cost_low=cost * (1 + low),
            cost_high=cost * (1 + high),
            usd_per_million_tokens=cost / tokens * 1e6,
            price_date=_day(price.get("date") or price.get("read")),
            price_source=price.get("provider") or price.get("source"),
        )
        sources["price"] = (
            f"${usd:g}/device-hour: "
            + ", ".join(
                str(price[k]) for k in ("measures", "source", "url", "date") if price.get(k)
            )
            + (f" (read {price['read']})" if price.get("read") else "")
        )
    else:
        unpriced = "no price: pass prices={" + repr(key) + ": DOLLARS_PER_DEVICE_HOUR}"
        row["note"] = "; ".join(filter(None, [row.get("note"), unpriced]))
    return {**row, "sources": sources}


# --------------------------------------------------------------------------- wb.plan
def plan(
    model,
    tokens: int,
    batch_size: int | None = None,
    seq_len: int | None = None,
    precision: str = "auto",
    devices=None,
    *,
    prices: dict | str | Path | None = None,
    mfu: float | dict | None = None,
    runs: str | Path | None = None,
    references: str | Path | dict | None = None,
    num_devices: int | None = None,
    checkpointing: bool | None = None,
    strategy: str | dict | None = None,
    global_batch: int | None = None,
) -> TrainingPlan:
    """Time and cost of training ``model`` on ``tokens`` tokens, per device, with sources.

    Parameters
    ----------
    model : ModelSpec or str
        ``wb.model("llama", size="7b")`` or a catalog name such as ``"gpt2-xl"``.
    tokens : int or float
        Training tokens in all (for a UNet: samples); ``1e9`` is read as 1,000,000,000.
    batch_size, seq_len : int
        Samples per device per step and tokens per sample, as for ``wb.plan_memory``.
    global_batch : int, optional
        Instead of ``batch_size``: samples a step over all devices, as Megatron's
        ``--global-batch-size`` and MLPerf's logs state it. It may be below the device count
        (8 on 64 devices): tensor, pipeline and context parallel then take the devices the
        data-parallel replicas cannot, for every replica takes the same whole samples a step.
    precision : {"auto", "bf16", "fp16", "fp32", "fp8"}
        ``auto``: bf16 on the accelerators, the detected device's own choice on its row.
        ``fp8``: the chips' fp8 peaks and fp8 references (memory planned as bf16); a chip
        without fp8 (A100) gets no throughput.
    devices : list of str, optional
        Rows to plan: names from ``backends.chips.CHIPS`` and ``"detected"`` (this machine).
        Default: Gaudi2, Gaudi3, A100 80GB, H100 SXM, H200, detected.
    prices : dict or path, optional
        Dollars per device-hour that replace the shipped on-demand prices:
        ``{"H100": 2.5, "Gaudi2": 1.3, "detected": 0.4}`` or a JSON file of that form.
    mfu : float or dict, optional
        Your MFU (a fraction) for every device or per device name: used before anything else.
    runs : path, optional
        Where your runs are (default ``./runs``, or ``$WORKBENCH_RUNS``); ``os.devnull`` to
        plan without them. A path that is not a directory is refused.
    references : path or dict, optional
        A references file (or its content) in the form of ``workbench/assets/plan_references.json``.
    checkpointing : bool or "selective", optional
        Gradient checkpointing as you will run it: True (or ``"full"``) or False keeps every
        layout to it; ``"selective"``: Megatron's selective recompute (the attention's core
        only); None (default) lets the planner turn it on only where memory needs it.
    strategy : str or dict, optional
        The stack you will run: ``"ddp"``, ``"zero1"``, ``"zero2"``, ``"zero3"``,
        ``"zero2-offload"``, ``"zero3-offload"``, ``"fsdp"``, ``"megatron"`` (a dict pins
        its degrees and micro-batch: ``{"name": "megatron", "tp": 4, "pp": 4, "mb": 1}``),
        ``"optimum-habana"`` (ZeRO-3 + gradient checkpointing) or ``"deepspeed"``
        (``wb.launch``'s, ZeRO-2). Each row plans the fastest layout that stack runs, with its
        memory, communication and launch line (the MFU is the nearest reference's, whatever
        stack it ran). Default None: the fastest that fits of them all (the row's ``stack``
        says which).
    num_devices : int, optional
        Devices per row (e.g. 8, one server), at most 4096, in the fastest layout that fits.
        Where they do not hold a step: the fewest that do. Default: the count cheapest per
        token from the fewest that hold a step up to 8x as many.

    Returns
    -------
    TrainingPlan
        ``table()``, ``cheapest()``, ``fastest()``, ``row(name)``; a chart in a notebook.

    Examples
    --------
    >>> from workbench.planning.planner import plan  # also wb.plan
    >>> p = plan("gpt2-small", tokens=10**9, batch_size=16, seq_len=1024, devices=["H100", "H200"])
    >>> p.row("H200")["mfu_from"]
    'measured by this project'
    """
    if not isinstance(model, (ModelSpec, str)):
        raise TypeError(
            "model must be a ModelSpec or a catalog name such as 'gpt2-small', got "
            f"{type(model).__name__}"
        )
    if int(_positive("tokens", tokens, float)) < 1:
        raise ValueError(
            f"tokens must be at least 1: a count of training tokens (images for a UNet), "
            f"e.g. tokens=1e9, got {tokens!r}"
        )
    tokens = int(tokens)  # 1e9 reads as well as 10**9
    if checkpointing == "full":  # Megatron's --recompute-granularity full: every layer's
        checkpointing = True
    if checkpointing not in (None, True, False, "selective"):
        raise ValueError(
            f"checkpointing must be True (or 'full'), False, None or 'selective', "
            f"got {checkpointing!r}"
        )
    if num_devices is not None and _positive("num_devices", num_devices) > MAX_DEVICES:
        raise ValueError(
            f"num_devices={num_devices} is past what the planner models (at most "
            f"{MAX_DEVICES} devices): pass num_devices <= {MAX_DEVICES}"
        )
    if precision not in PLAN_PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PLAN_PRECISIONS)}")
    stack = strategies.stack_of(strategy)
    if stack.checkpointing is not None and checkpointing not in (None, stack.checkpointing):
        raise ValueError(
            f"checkpointing={checkpointing} contradicts strategy={stack.name!r}, whose recipe "
            f"runs with gradient checkpointing {'on' if stack.checkpointing else 'off'}: leave "
            "checkpointing out, or pick another strategy"
        )
    if checkpointing == "selective" and not stack.megatron:
        raise ValueError(
            f"checkpointing='selective' is Megatron's selective recompute, which {stack.title} "
            "does not run: pass strategy='megatron' (or None), or checkpointing=True or False"
        )
    if num_devices is not None and num_devices % stack.replica:
        raise ValueError(
            f"num_devices={num_devices} is not a multiple of the {stack.replica} devices a "
            f"replica of strategy {stack.title} takes: pass num_devices={stack.replica} x the "
            "data-parallel replicas you want"
        )
    if batch_size is not None:
        _positive("batch_size", batch_size)
    if global_batch is not None:
        _positive("global_batch", global_batch)
    strategies.check_batch(stack, batch_size, global_batch, num_devices)
    spec = as_model(model)
    keys = _rows_asked(devices)
    # fp8 (Transformer Engine, Intel's fp8) keeps 16-bit weights and fp32 optimizer state:
    # memory as bf16
    mp = plan_memory(
        spec,
        batch_size=batch_size or 1,  # a global batch: its micro-batches, from 1 (layout.fitting)
        seq_len=seq_len,
        precision="bf16" if precision == "fp8" else precision,
    )
    if spec.family in UNETS and seq_len is not None:
        native = int(mp._dims["unet"].get("sample_size") or 64)
        if seq_len >= 4 * native:  # no UNet is trained at 4x its latent size: these are pixels
            raise ValueError(
                f"seq_len={seq_len} for {spec.name} counts latents, not pixels (latents = pixels "
                f"/ 8, the VAE's factor): for {seq_len}x{seq_len} images pass "
                f"seq_len={seq_len // 8} (its native size: seq_len={native}, {native * 8} px)"
            )
    try:
        per_unit, why = (
            flops_per_sample(spec) if spec.family in UNETS else flops_per_token(spec, mp.seq_len),
            "",
        )
    except (ValueError, ImportError) as e:
        per_unit, why = None, f"no throughput: {e}"
    ctx = {
        "mfu": _mfu_asked(mfu),
        "runs": your_runs(runs),
        "refs": refs.references(references),
        "prices": refs.prices(prices),
        "requested": precision,
        "why_no_flops": why,
        "num_devices": num_devices,
        "checkpointing": checkpointing,
        "stack": stack,
        "global_batch": global_batch,
    }
    prec = "fp8" if precision == "fp8" else mp.precision
    rows = [_row(k, spec, mp, tokens, per_unit, prec, ctx) for k in keys]
    image = spec.family in UNETS
    return TrainingPlan(
        model=spec.name,
        num_params=mp.num_params,
        tokens=tokens,
        batch_size=batch_size,
        global_batch=global_batch,
        seq_len=mp.seq_len,
        precision=prec,
        flops_per_token=None if image else per_unit,
        rows=rows,
        unit="image" if image else "token",
        flops_per_image=per_unit if image else None,
        stack=stack.title if strategy is None else f"{stack.title} (strategy={strategy!r})",
    )
