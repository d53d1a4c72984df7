"""How far ``wb.plan`` is from published training results: each reference planned from the
others (leave-one-out) and each held-out published result planned from the references, every
one through ``wb.plan`` itself, with the MFU lookup's own error beside it (``plan_accuracy``),
and the record of it that ``assets/plan_references.json`` keeps for every plan row's range.
"""

from __future__ import annotations

import math
import os
import statistics
from pathlib import Path
from typing import Any

from ..backends.chips import CHIPS
from ..jsonvalues import plain
from . import references as refs
from .layout import full_recompute
from .matching import mix_of, nearest_reference, spec_of
from .planner import plan
from .references import FAMILIES, family_of
from .warmup import warmup_of


def _lookup_mfu(data: dict, target: dict) -> dict | None:
    """The MFU the reference lookup alone takes for ``target`` (no layout, no bandwidth), with
    the checkpointing correction; None without a reference. What the planner's accuracy
    measured before it ran through ``wb.plan``."""
    found = CHIPS[refs.chip_name(target["chip"], "references")]
    if not found.tflops.get(target["precision"]):
        return None
    run = {
        "params": target["params"],
        "seq_len": target.get("seq_len"),
        "mix": mix_of(target),
        "arch": target.get("arch", "decoder"),
        "lora": bool(target.get("lora")),
    }
    got = nearest_reference(data, found, target["precision"], run)
    if got is None:
        return None
    recompute = full_recompute(target.get("checkpointing")) / full_recompute(got["checkpointing"])
    return {"mfu": got["mfu"] * recompute, "from": got["source"]}


def _through_plan(data: dict, target: dict) -> dict[str, Any]:
    """``target`` predicted by ``wb.plan`` itself from the references in ``data``: its model,
    batch a device, sequence length, precision, chip and device count, your runs left out.
    ``steady_error`` = the planned tokens/s a device / the published - 1 (published tokens/s =
    its MFU x the peak / the planned model's FLOPs a token). ``error``: where the result states
    its whole run (``run``: samples and runtime), what ``wb.plan`` answers for that run's own
    tokens, its time, against the published runtime (as tokens/s: the published runtime / the
    planned time - 1, warm-up included on both sides); else ``steady_error``."""
    how = target["plan"]
    whole = target.get("run") if how.get("seq_len") else None
    tokens = whole["samples"] * how["seq_len"] if whole else 10**9
    got = plan(
        spec_of(target),
        tokens=tokens,
        batch_size=None if how.get("global_batch") else how["batch_size"],
        global_batch=how.get("global_batch"),  # as the run states its step, where it does
        seq_len=how.get("seq_len"),
        precision=target["precision"],
        devices=[target["chip"]],
        num_devices=target.get("devices") or 1,
        checkpointing=target.get("checkpointing"),  # as the published run did, where it says
        strategy=target.get("stack"),  # the stack it ran (wb.plan's strategy=), where it says
        references=data,
        runs=os.devnull,
    )
    row = got.rows[0]
    per_unit = got.flops_per_token or got.flops_per_image
    peak = CHIPS[row["device"]].tflops.get(target["precision"])
    out = {"layout": row.get("strategy"), "planned_devices": row.get("devices")}
    if row.get("tokens_per_s") is None:
        none = ("predicted", "published", "predicted_mfu", "error", "steady_error")
        return {**out, **dict.fromkeys(none), "measured_as": None, "note": row.get("note")}
    assert peak is not None  # a published result's chip has a peak in its precision
    published = target["mfu"] * peak * 1e12 / per_unit
    predicted = row["tokens_per_s"] / row["devices"]
    steady = predicted / published - 1
    return {
        **out,
        "predicted": round(predicted, 1),
        "published": round(published, 1),
        "predicted_mfu": round(predicted * per_unit / (peak * 1e12), 4),  # what the plan implies
        "measured_as": "whole run" if whole else "steady rate",
        "error": round(whole["runtime_s"] / (row["hours"] * 3600) - 1 if whole else steady, 4),
        "steady_error": round(steady, 4),
        "note": row.get("note", ""),
        "from": row["sources"]["mfu"].split(";")[0],
        # a prediction from the stated default MFU measures the default, not the planner
        "assumption": row.get("mfu_from") == "default",
    }


def _scored(data: dict, target: dict) -> dict[str, Any]:
    """``target`` through ``wb.plan`` and through the lookup alone, from ``data``."""
    lookup = _lookup_mfu(data, target)
    out = {
        "chip": target["chip"],
        "precision": target["precision"],
        "model": target["model"],
        "devices": target.get("devices"),
        "mfu": target["mfu"],
        "lookup_mfu": None if lookup is None else round(lookup["mfu"], 4),
        "lookup_error": None if lookup is None else round(lookup["mfu"] / target["mfu"] - 1, 4),
    }
    return {**out, **_through_plan(data, target)}


def leave_one_out(references: str | Path | None = None) -> list[dict[str, Any]]:
    """Each reference predicted by ``wb.plan`` from the others (its twins, the same run on
    another number of devices, leave with it: they would predict it almost exactly):
    ``error`` through the planner (memory, layout, communication, bandwidth, MFU), and
    ``lookup_error``, the MFU lookup's alone."""
    data = refs.references(references)
    out = []
    for e in data["mfu"]:
        rest = {**data, "mfu": [r for r in data["mfu"] if not _twin(r, e)]}
        out.append(_scored(rest, e))
    return out


def _twin(a: dict, b: dict) -> bool:
    """The same run (chip, precision, model size, sequence length), on any number of devices."""
    return all(a.get(k) == b.get(k) for k in ("chip", "precision", "params", "seq_len"))


def held_out(references: str | Path | None = None) -> list[dict[str, Any]]:
    """The references file's held-out published results predicted by ``wb.plan`` from its
    references."""
    data = refs.references(references)
    return [_scored(data, e) for e in data.get("held_out", {}).get("results", [])]


def single_reference_bound(
    references: str | Path | None = None, family: str = "Gaudi"
) -> list[dict[str, Any]]:
    """How well any rule that plans from one published figure could do, with hindsight: each
    reference of ``family`` planned from the others as in ``leave_one_out`` (``error``: with the
    figure ``wb.plan`` picks), then with each figure of its own chip and precision in turn in
    that figure's place (the warm-up the others give kept), and the one that came closest
    (``best_error``, ``best_from``). A row whose ``best_error`` is still large holds something
    no single figure of its chip carries (a one-off inside a short run, a slow compilation):
    a better choice of reference cannot reach it; a small one says the choice could."""
    data = refs.references(references)
    out = []
    for e in data["mfu"]:
        if family_of(e["chip"]) != family:
            continue
        rest = {**data, "mfu": [r for r in data["mfu"] if not _twin(r, e)]}
        picked = _through_plan(rest, e)
        warm = warmup_of(rest, CHIPS[e["chip"]])["seconds"]
        best = None
        for c in rest["mfu"]:
            if (c["chip"], c["precision"]) != (e["chip"], e["precision"]):
                continue
            if (c.get("arch") == "unet") != (e.get("arch") == "unet"):
                continue  # wb.plan never carries a UNet's figure to a transformer, nor back
            # the candidate alone in the references: its figure is the one wb.plan takes
            got = _through_plan({**rest, "mfu": [c]}, e)
            if got["predicted"] is None:
                continue
            error = got["steady_error"]
            run = e.get("run")
            if got["measured_as"] == "whole run":  # the time of the run, the others' warm-up
                tokens = run["samples"] * e["plan"]["seq_len"]
                hours_s = warm + tokens / (got["predicted"] * got["planned_devices"])
                error = run["runtime_s"] / hours_s - 1
            if best is None or abs(error) < abs(best[0]):
                best = (round(error, 4), c["model"])
        out.append(
            {
                "chip": e["chip"],
                "precision": e["precision"],
                "model": e["model"],
                "devices": e.get("devices"),
                "error": picked["error"],
                "best_error": None if best is None else best[0],
                "best_from": None if best is None else best[1],
            }
        )
    return out


LEVEL = 0.8  # the stated level of every plan row's interval
ENOUGH = 10  # leave-one-out errors a family needs for its own interval; fewer: pooled


def _conformal(errors: list[float], level: float) -> tuple[float, float]:
    """The k-th smallest and k-th largest of n errors, k = floor((n + 1)(1 - level) / 2), at
    least 1: split conformal prediction's finite-sample interval (Lei et al., "Distribution-Free
    Predictive Inference for Regression", JASA 2018, section 2.2), which holds a new error
    exchangeable with these at least 1 - 2k / (n + 1) of the time (>= ``level``, or n / (n + 1)
    where n is too small for it); the plain quantiles of n errors hold less."""
    errors = sorted(errors)
    k = max(1, math.floor((len(errors) + 1) * (1 - level) / 2 + 1e-9))
    return errors[k - 1], errors[-k]


def _measured(row: dict) -> bool:
    """A row with an error that measures the planner (not one planned from the default MFU)."""
    return row.get("error") is not None and not row.get("assumption")


def _band(loo: list[dict], family: str, level: float, without: int | None = None):
    """``intervals``' (low, high) for ``family`` from the ``loo`` rows, row ``without`` left
    out; the family's own errors where it has ``ENOUGH``, else every family's."""
    rows = [r for i, r in enumerate(loo) if i != without and _measured(r)]
    own = [r["error"] for r in rows if family_of(r["chip"]) == family]
    basis = own if len(own) >= ENOUGH else [r["error"] for r in rows]
    return *_conformal(basis, level), len(own), len(rows)


def inside_without_itself(loo: list[dict], level: float = LEVEL) -> list[bool | None]:
    """For each leave-one-out row, whether its error lies in the interval made from the other
    rows (a jackknife): the interval's coverage on the errors it is made from, each left out of
    its own interval. None for a row that measures no planner (see ``_measured``)."""
    out: list[bool | None] = []
    for i, r in enumerate(loo):
        low, high, *_ = _band(loo, family_of(r["chip"]), level, without=i)
        out.append(low <= r["error"] <= high if _measured(r) else None)
    return out


def intervals(loo: list[dict], held: list[dict], level: float = LEVEL) -> dict[str, Any]:
    """Per chip family, the interval that holds ``level`` of ``wb.plan``'s leave-one-out errors
    (the (1 - level) / 2 and (1 + level) / 2 quantiles; a family with fewer than ``ENOUGH``
    takes the pooled errors of every family, and says so), and its coverage measured on the
    held-out results, which the interval never saw, and on the leave-one-out ones, each left
    out of its own interval (``inside_without_itself``). Rows planned from the default MFU are
    left out: they measure an assumption."""
    jackknife = inside_without_itself(loo, level)
    out: dict[str, Any] = {"level": level}
    for family in FAMILIES:
        low, high, n_own, n_all = _band(loo, family, level)
        test = [r["error"] for r in held if _measured(r) and family_of(r["chip"]) == family]
        inside = sum(low <= e <= high for e in test)
        mine = [
            j for j, r in zip(jackknife, loo) if j is not None and family_of(r["chip"]) == family
        ]
        out[family] = {
            "low": round(low, 4),
            "high": round(high, 4),
            "from": f"{family} leave-one-out ({n_own})"
            if n_own >= ENOUGH
            else f"pooled leave-one-out of every family ({n_all}): {family} has {n_own}",
            "held_out": len(test),
            "coverage": round(inside / len(test), 4) if test else None,
            "leave_one_out_coverage": round(sum(mine) / len(mine), 4) if mine else None,
        }
    return out


def by_family(scored: list[dict[str, Any]], key: str = "error") -> dict[str, dict[str, Any]]:
    """Median and worst absolute ``key`` (``error``: through ``wb.plan``; ``lookup_error``)
    per chip family of ``leave_one_out()`` or ``held_out()`` rows; rows without a
    prediction are counted apart."""
    out = {}
    for family in FAMILIES:
        rows = [r for r in scored if family_of(r["chip"]) == family]
        errors = [abs(r[key]) for r in rows if r[key] is not None]
        out[family] = {
            "n": len(errors),
            "unpredicted": len(rows) - len(errors),
            "median_abs_error": round(statistics.median(errors), 4) if errors else None,
            "worst_abs_error": round(max(errors), 4) if errors else None,
        }
    return out


def plan_accuracy(references: str | Path | None = None, summary: bool = False):
    """How far ``wb.plan`` is from published training results, as a DataFrame: each reference
    predicted from the others (``check`` = ``"leave-one-out"``) and each held-out published
    result from the references (``"held-out"``), every one through ``wb.plan`` itself (its
    model, batch, sequence length, precision, chip and devices), with the chip family, the
    published and planned tokens/s a device, ``error`` (planned / published - 1), the layout
    the plan chose, the MFU lookup's own error beside it (``lookup_error``), what the
    prediction came from, where the published figure is, its ``stack`` (planned with
    ``strategy=`` that stack where the result states it) and ``assumption`` (planned from the
    stated default MFU: it measures the default, not the planner).

    ``summary=True``: per check, chip family and stack, the results (``n``), the median and
    worst absolute error, and the family's interval at ``level`` (80%, from the leave-one-out
    errors: ``low``, ``high``) with its ``coverage``: the share of the held-out results of
    that family and stack inside it, and of the leave-one-out ones, each inside the interval
    made without it (``accuracy.inside_without_itself``).

    Examples
    --------
    >>> import workbench as wb
    >>> acc = wb.plan_accuracy()
    >>> sorted(acc.family.unique())
    ['A100', 'Gaudi', 'H100/H200']
    """
    import pandas as pd

    data = refs.references(references)
    sources = {
        (e["chip"], e["precision"], e["model"]): f"{e['source']}, {e['url']} (read {e['read']})"
        for e in data["mfu"] + data.get("held_out", {}).get("results", [])
    }
    stacks = {
        (e["chip"], e["precision"], e["model"]): e["stack"]["name"]
        if isinstance(e.get("stack"), dict)
        else e.get("stack")
        for e in data["mfu"] + data.get("held_out", {}).get("results", [])
    }
    rows = []
    for check, scored in (
        ("leave-one-out", leave_one_out(references)),
        ("held-out", held_out(references)),
    ):
        for r in scored:
            rows.append(
                {
                    "check": check,
                    "family": family_of(r["chip"]),
                    **r,
                    "source": sources[(r["chip"], r["precision"], r["model"])],
                    "stack": stacks[(r["chip"], r["precision"], r["model"])],
                }
            )
    df = pd.DataFrame(rows)
    return _summary(df) if summary else df


def _summary(df):
    """``plan_accuracy(summary=True)`` of the rows of ``plan_accuracy()``."""
    import pandas as pd

    loo = df[df.check == "leave-one-out"].to_dict("records")
    held = df[df.check == "held-out"].to_dict("records")
    bands = intervals(loo, held)
    df = df.assign(jackknife=None)
    df.loc[df.check == "leave-one-out", "jackknife"] = inside_without_itself(loo)
    out = []
    for (check, family, stack), g in df.fillna({"stack": "not stated"}).groupby(
        ["check", "family", "stack"]
    ):
        measured = g[g.error.notna() & ~g.assumption.fillna(False).astype(bool)]
        e = measured.error.abs()
        band = bands[family]
        inside = (
            measured.error.between(band["low"], band["high"])
            if check == "held-out"
            else measured.jackknife.astype(bool)
        )
        out.append(
            {
                "check": check,
                "family": family,
                "stack": stack,
                "n": len(measured),
                "assumed": len(g) - len(measured),
                "median_abs_error": e.median() if len(e) else None,
                "worst_abs_error": e.max() if len(e) else None,
                "level": bands["level"],
                "low": band["low"],
                "high": band["high"],
                "coverage": inside.mean() if len(e) else None,
            }
        )
    return pd.DataFrame(out)


def accuracy_record(references: str | Path | None = None) -> dict[str, Any]:
    """What ``plan_references.json`` records under ``accuracy`` (and ``wb.plan`` reads for its
    ranges): per chip family, the median and worst absolute error through ``wb.plan`` (its
    time for a run that states its runtime, else its steady rate), of its steady rate alone
    and of the MFU lookup alone, leave-one-out and held-out, and the intervals plan rows carry."""
    return accuracy_summary(leave_one_out(references), held_out(references))


def accuracy_summary(loo: list[dict], held: list[dict]) -> dict[str, Any]:
    """``accuracy_record`` of already scored ``leave_one_out()`` and ``held_out()`` rows (or
    the rows of ``plan_accuracy()`` of each check)."""
    # pandas' NaN (a row without a figure) back to None: jsonvalues' "null" rule
    loo, held = (
        [plain(r, nonfinite="null") for r in loo],
        [plain(r, nonfinite="null") for r in held],
    )
    return {
        "leave_one_out_by_family": by_family(loo),
        "held_out_by_family": by_family(held),
        "steady_leave_one_out_by_family": by_family(loo, "steady_error"),
        "steady_held_out_by_family": by_family(held, "steady_error"),
        "lookup_leave_one_out_by_family": by_family(loo, "lookup_error"),
        "lookup_held_out_by_family": by_family(held, "lookup_error"),
        "intervals": intervals(loo, held),
        "leave_one_out": [{k: r[k] for k in ACCURACY_KEYS} for r in loo],
        "held_out": [{k: r[k] for k in ACCURACY_KEYS} for r in held],
    }


ACCURACY_KEYS = (
    "chip",
    "precision",
    "model",
    "devices",
    "mfu",
    "lookup_error",
    "measured_as",
    "error",
    "steady_error",
    "assumption",
)
