"""Which published figure a planned run takes, and how the figure carries over to it.

* **nearest** (``nearest_reference``): among the chip's references (else those of a chip with
  the same peak) at the run's precision, the same architecture, the same kind of training
  (LoRA or full), then the smallest |ln size ratio| + the difference of the FLOP mixes
  (``mix_of``: ln of FLOPs a token / 6N, the attention's share);
* **device count** (``efficiency``, ``scaling_factor``): a figure holds the losses of its own
  device count; the planned count's replace them (Gaudi's published one-to-eight inside a
  server, LLM Foundry's 64-over-8 past one);
* **memory-bound share** (``carried``): the figure's step split into its own bytes through
  HBM and its matmuls; the planned run's FLOPs at that matmul rate plus its own bytes at its
  chip's bandwidth.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

from ..backends.chips import CHIPS
from ..catalog.modelspec import ModelSpec
from ..catalog.modelspec import model as as_model
from . import layout
from .flops import UNETS, flops_per_sample, flops_per_token
from .footprint import traffic_per_unit
from .memory import plan_memory
from .strategies import stack_of

SIMILAR = 4.0  # a run counts for a model within this factor of its parameter count


ENCODERS = ("bert",)  # catalog families that are encoders; unet/sd are "unet"; the rest decode


def kind_of(spec, seq_len: int | None) -> dict[str, Any]:
    """What the planner matches a reference on: size, FLOP mix (sequence length), architecture,
    LoRA."""
    arch = "unet" if spec.family in UNETS else "encoder" if spec.family in ENCODERS else "decoder"
    seq = seq_len if arch != "unet" else None
    return {
        "params": spec.num_params,
        "seq_len": seq,
        "mix": _mix(spec, seq) if seq else None,
        "arch": arch,
        "lora": spec.lora is not None,
    }


def _mix(spec, seq: int) -> float | None:
    """ln(FLOPs a token / 6N): how much of a token's work is attention over the sequence
    (12·L·d·S against the weights' 6N), which runs at another efficiency than the weights'
    matmuls; it grows with the sequence over the width, not with the sequence alone."""
    try:
        return math.log(flops_per_token(spec, seq) / (6 * spec.num_params))
    except (ValueError, ImportError, ZeroDivisionError):
        return None


def spec_of(entry: dict) -> ModelSpec:
    """The ModelSpec a reference's ``plan`` names: a catalog name, or a family with its shape."""
    spec = dict(entry["plan"]["spec"])
    name = spec.pop("model", None) or spec.pop("family")
    return as_model(name, **spec) if spec else as_model(name)


@functools.lru_cache(maxsize=512)
def _mix_of(plan_json: str) -> float | None:
    """``_mix`` of a reference's ``plan`` (every lookup reads the same references)."""
    how = json.loads(plan_json)
    return _mix(spec_of({"plan": how}), how["seq_len"]) if how.get("seq_len") else None


def mix_of(e: dict) -> float | None:
    """``_mix`` of reference ``e``; None where it names no model or sequence."""
    return _mix_of(json.dumps(e["plan"], sort_keys=True)) if e.get("plan") else None


def _distance(e: dict, run: dict) -> tuple:
    """How far reference ``e`` is from ``run``: another architecture first, then LoRA against
    full training, then |ln| of the size ratio + the difference of their FLOP mixes (``_mix``;
    the sequence-length ratio where a mix is unknown)."""
    ours, theirs = run.get("mix"), mix_of(e)
    if ours is not None and theirs is not None:
        seq = abs(theirs - ours)
    else:
        seq = (
            0.0
            if not (e.get("seq_len") and run.get("seq_len"))
            else abs(math.log(e["seq_len"] / run["seq_len"]))
        )
    return (
        e.get("arch", "decoder") != run["arch"],
        bool(e.get("lora")) != run["lora"],
        round(abs(math.log(e["params"] / run["params"])) + seq, 6),
    )


def nearest_reference(data: dict, found, precision: str, run: dict) -> dict | None:
    """The reference nearest ``run`` (``kind_of``) among ``found``'s chip and the chips with
    the same peak (the chip's own on a tie); a UNet takes only UNet references, and a
    transformer never takes one."""
    peak = found.tflops.get(precision)
    pool = [
        e
        for e in data["mfu"]
        if e.get("precision") == precision
        and (e.get("arch") == "unet") == (run["arch"] == "unet")
        and (e["chip"] == found.name or CHIPS[e["chip"]].tflops.get(precision) == peak)
    ]
    if not pool:
        return None
    e = min(pool, key=lambda e: (*_distance(e, run), e["chip"] != found.name))
    how = (
        ""
        if e["chip"] == found.name
        else f" (applied to {found.name}: the same {peak:g} TFLOP/s {precision} peak)"
    )
    ratio = e["params"] / run["params"]
    if not 1 / SIMILAR <= ratio <= SIMILAR:  # say how far the nearest figure is from this model
        far = "much larger" if ratio > 1 else "much smaller"
        how += (
            f"; a model {ratio:.3g}x the size of this one: the MFU of a model so {far} may not "
            "carry over"
        )
    if e.get("arch", "decoder") != run["arch"]:
        how += f"; no {run['arch']} reference on this chip: an {e.get('arch', 'decoder')}'s figure"
    what = "measured by this project" if e["kind"] == "measured" else "published"
    return {
        "mfu": e["mfu"],
        "plan": e.get("plan"),
        "devices": e.get("devices") or 1,
        "chip": e["chip"],
        "kind": what,
        "checkpointing": e.get("checkpointing") or False,  # True, False or "selective"
        "stack": e.get("stack"),
        "size_ratio": ratio,
        "source": f"{what}: {e['chip']}, {e['model']}, {e['measures']}{how}; {e['source']}, "
        f"{e['url']} (dated {e['date']}, read {e['read']})",
    }


# --------------------------------------------------------------------------- carrying a figure over
def efficiency(data: dict, found, n: int) -> float:
    """Per-device throughput on ``n`` devices over that on one, as published: inside a server
    (2-8 devices) the chip's own one-to-eight figure where there is one (Gaudi: optimum-habana's
    DDP baselines, ``scaling.gaudi``), across servers (more than 8) times the 64-over-8
    figure (``scaling.efficiency``, LLM Foundry on H100s)."""
    if n <= 1:
        return 1.0
    s = data["scaling"]
    name = getattr(found, "name", None)
    inside = next((g["efficiency"] for g in s.get("gaudi", []) if g["chip"] == name), 1.0)
    return inside * (s["efficiency"] if n > layout.PER_NODE else 1.0)


def scaling_factor(data: dict, found, n: int, got: dict | None) -> float:
    """``efficiency`` at ``n`` over that of the figure's own device count (a reference of 8
    devices already holds the 8-way loss; your runs and your ``mfu=`` count as one device)."""
    ref = (got or {}).get("devices") or 1
    return efficiency(data, found, n) / efficiency(data, found, ref)


@functools.lru_cache(maxsize=256)
def _own_overhead(plan_json: str, chip: str, devices: int, precision: str, stack, ckpt, rate):
    """A reference's own run planned as ``layout.best`` lays it out (its model, batch,
    sequence, device count and stack) at its own figure (``rate``, FLOP/s a device): its step
    over its compute, what the planner charges for communication and the pipeline's bubble (and
    selective recompute, which a figure in model FLOPs has paid too)."""
    how = json.loads(plan_json)
    spec = spec_of({"plan": how})
    unet = spec.family in UNETS
    bf16 = "bf16" if precision == "fp8" else precision
    mp = plan_memory(spec, batch_size=how["batch_size"], seq_len=how.get("seq_len"), precision=bf16)
    per_unit = flops_per_sample(spec) if unet else flops_per_token(spec, mp.seq_len)
    found = CHIPS[chip]
    trainable = mp._dims.get("trainable", mp.num_params)
    stack = stack_of(json.loads(stack))
    pick = layout.best(mp, chip, devices, found, per_unit, rate, trainable, ckpt, stack)
    if not pick:
        return 1.0
    paid = layout.selective_cost(mp, per_unit) if pick["layout"].selective else 1.0
    return pick["timing"]["step"] / pick["timing"]["compute"] * paid  # the figure paid it too


def own_overhead(got: dict, precision: str, achieved: float) -> float:
    """What the reference's figure paid beyond its compute in the planner's own measure
    (``_own_overhead``): a figure holds its own run's communication and bubble, so the planned
    run's are charged in their place, not on top (planned from itself, a run gets its figure
    back). ``achieved``: its rate without recompute. 1.0 where it states no run to plan."""
    how = got.get("plan")
    if not how or not how.get("batch_size") or got.get("chip") not in CHIPS:
        return 1.0
    ckpt = got.get("checkpointing") or None  # as it ran where it says; else as memory needs
    key = json.dumps(how, sort_keys=True)
    stack = json.dumps(got.get("stack"))  # a dict (Megatron's pins) is no cache key
    return _own_overhead(key, got["chip"], got["devices"], precision, stack, ckpt, achieved)


def fp8_work(d, seq: int, flops: float, ratio: float) -> float:
    """A token's FLOPs (``flops``, the planner's count) as an fp8 run spends them, in FLOPs at
    the fp8 rate: fp8 covers the transformer's linear layers (Transformer Engine's modules;
    Intel's Gaudi fork the same), while the attention's own matmuls (12 L d S) and the output
    layer run in bf16, ``ratio`` (the chip's fp8 / bf16 peak) times slower, and an embedding
    that is not also the output layer is a lookup, no matmul (Transformer Engine's recipes:
    ``fp8_dpa`` off; Megatron Core's output layer is no TE module: docs/planner-sources.md)."""
    k = 4 if "trainable" in d else 6  # LoRA: no weight gradient for the frozen table
    table = k * d["vocab"] * d["h"]
    head = table if d.get("lm_head") else 0
    lookup = 0 if (d.get("tied") and head) else table
    slow = 12 * d["layers"] * d["h"] * seq + head
    return flops - lookup + (ratio - 1) * slow


@functools.lru_cache(maxsize=256)
def _bytes_and_flops(plan_json: str, ratio: float) -> tuple[float, float, float] | None:
    """(bytes through HBM, FLOPs, ``fp8_work`` at ``ratio``) a token of a reference's own run
    (its ``plan``: model and sequence); None for a UNet or a run without a sequence."""
    how = json.loads(plan_json)
    if not how.get("seq_len"):
        return None
    spec = spec_of({"plan": how})
    if spec.family in UNETS:
        return None
    mp = plan_memory(spec, batch_size=1, seq_len=how["seq_len"], precision="bf16")
    flops = flops_per_token(spec, mp.seq_len)
    work = fp8_work(mp._dims, mp.seq_len, flops, ratio) if ratio else flops
    return traffic_per_unit(mp._dims, mp.seq_len, "bf16"), flops, work


def carried(
    got: dict, found, mp, per_unit: float, peak: float | None, precision: str
) -> tuple[float, str]:
    """(speed-up, why) of a reference's figure carried to this run: the reference's step
    splits into its memory-bound part (``traffic_per_unit`` bytes of its own model and
    sequence at its own chip's HBM bandwidth) and its matmuls (the rest, never faster than
    the peak); this run's step is its FLOPs at that matmul rate plus its own bytes at this
    chip's bandwidth. A smaller model (more bytes a FLOP) runs slower than the reference's
    MFU says, an H200 faster than the H100 figure it takes. In fp8 the matmuls are counted
    as ``fp8_work``: a model whose attention and output layer take more of its FLOPs (a long
    sequence, a large vocabulary) runs fewer of them at the fp8 rate."""
    ref = CHIPS.get(got.get("chip") or "")
    if ref is None or not (ref.hbm_tbps and found.hbm_tbps) or not got.get("plan"):
        return 1.0, ""
    ratio = found.tflops["fp8"] / found.tflops["bf16"] if precision == "fp8" else 0.0
    theirs = _bytes_and_flops(json.dumps(got["plan"], sort_keys=True), ratio)
    if theirs is None or mp._dims["family"] in ("unet", "sd"):
        return 1.0, ""
    their_bytes, their_flops, their_work = theirs
    their_memory = their_bytes / (ref.hbm_tbps * 1e12) / their_flops  # seconds a FLOP
    matmul = (1 / got["achieved"] - their_memory) * their_flops / their_work  # a unit of work
    per_work = max(matmul, 1 / (peak * 1e12) if peak else 0.0)
    work = fp8_work(mp._dims, mp.seq_len, per_unit, ratio) if ratio else per_unit
    our_memory = traffic_per_unit(mp._dims, mp.seq_len, mp.precision) / (found.hbm_tbps * 1e12)
    unit_s = work * per_work + our_memory
    speedup = per_unit / got["achieved"] / unit_s
    why = (
        f"x{speedup:.3g}: activations through HBM take {their_memory * got['achieved']:.0%} of "
        f"the reference's step ({their_bytes / their_flops * 1e3:.3g} bytes a kFLOP at "
        f"{ref.hbm_tbps:g} TB/s on {ref.name}) and {our_memory / unit_s:.0%} of this one's "
        f"({our_memory * found.hbm_tbps * 1e12 / per_unit * 1e3:.3g} bytes a kFLOP at "
        f"{found.hbm_tbps:g} TB/s)"
        + (
            f"; in fp8, {work / per_unit:.3g} FLOPs at the fp8 rate a FLOP counted against "
            f"the reference's {their_work / their_flops:.3g} (attention and the output layer "
            "in bf16)"
            if ratio
            else ""
        )
    )
    return speedup, why


def scaling_source(data: dict, found, n: int, got: dict, factor: float) -> str:
    """Where the scaling factor of a row comes from."""
    s, ref = data["scaling"], got.get("devices") or 1
    parts = [
        f"x{factor:.3g}: per-device throughput on {n} devices over that on {ref} (the figure's)"
    ]
    for g in s.get("gaudi", []):
        if g["chip"] == getattr(found, "name", None) and (n > 1) != (ref > 1):
            parts.append(
                f"{g['efficiency']:g} one card to eight: {g['measures']}; {g['source']}, "
                f"{g['url']} (read {g['read']})"
            )
    if (n > layout.PER_NODE) != (ref > layout.PER_NODE):
        parts.append(
            f"{s['efficiency']:g} across servers: {s['measures']}; {s['source']}, {s['url']} "
            f"(read {s['read']})"
        )
    return "; ".join(parts)
