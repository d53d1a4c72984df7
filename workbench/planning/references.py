"""The planner's data: published and measured MFU figures and device-hour prices, each with
where it came from.

They live in versioned data files inside the package (``assets/plan_references.json``,
``assets/plan_prices.json``), never in code; every entry names its source, its URL, the
date it was read and what it measures. A user's own prices (a dict, or a JSON file in the
same form) override the shipped ones.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from pathlib import Path
from typing import Any

from ..backends.chips import CHIPS
from ..backends.registry import chip

ASSETS = Path(__file__).resolve().parents[1] / "assets"
REFERENCES = ASSETS / "plan_references.json"
PRICES = ASSETS / "plan_prices.json"


def _read(path: str | Path, what: str) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(
            f"{what}: no file {str(path)!r}; pass a JSON file that exists, or a dict"
        ) from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{what}: {str(path)!r} is not JSON ({e})") from None


# the chips a plan has a row for: a fixed memory and peak (a CPU's are the host's: "detected")
PLANNED = tuple(name for name, c in CHIPS.items() if c.memory)


def chip_name(name: str, argument: str) -> str:
    """The ``CHIPS`` name of ``name`` (``"H100"`` -> ``"H100 SXM"``); unknown names, a bare
    ``"gaudi"`` and ``"cpu"`` are refused with the valid ones."""
    known = f"known: {', '.join(PLANNED)}, 'detected' (this machine)"
    key = re.sub(r"[\s_-]", "", str(name).lower())
    if key in ("gaudi", "intelgaudi"):  # the first Gaudi, dropped by Intel's software after 1.21
        raise ValueError(
            f"{argument}: {name!r} is ambiguous: say which Gaudi, 'Gaudi2' or 'Gaudi3' (the "
            f"first Gaudi, whose support Intel's software dropped after 1.21, is 'Gaudi1'); {known}"
        )
    try:
        found = chip(name)
    except ValueError:
        found = None
    if found is None or found.name not in PLANNED:
        why = (
            "a CPU has no fixed memory or peak to plan with: 'detected' plans this machine; "
            if found is not None
            else ""
        )
        near = difflib.get_close_matches(str(name), PLANNED, 1) if found is None else []
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ValueError(f"{argument}: unknown device {name!r}{hint}; {why}{known}") from None
    return found.name


def references(path: str | Path | dict | None = None) -> dict[str, Any]:
    """The MFU references, the scaling efficiency and the default (``path``: a file in the same
    form, or its content as a dict)."""
    data = dict(path) if isinstance(path, dict) else _read(path or REFERENCES, "references")
    for key in ("mfu", "scaling", "default"):
        if key not in data:
            where = "the dict" if isinstance(path, dict) else repr(str(path or REFERENCES))
            raise ValueError(f"references: {where} has no {key!r} entry")
    for entry in data["mfu"]:
        entry["chip"] = chip_name(entry["chip"], "references")
    return data


def _price_entry(name: str, value, origin: str) -> dict[str, Any]:
    if isinstance(value, dict):
        usd = value.get("usd_per_device_hour")
        entry = {**value}
    else:
        usd, entry = value, {}
    if (
        isinstance(usd, bool)
        or not isinstance(usd, (int, float))
        or not math.isfinite(usd)
        or usd < 0
    ):
        raise ValueError(
            f"prices: the price of {name!r} must be a number of dollars per device-hour "
            f">= 0, got {usd!r}"
        )
    entry.update(chip=name, usd_per_device_hour=float(usd))
    entry.setdefault("source", origin)
    return entry


def prices(overrides: dict | str | Path | None = None) -> dict[str, dict[str, Any]]:
    """Chip name -> price entry: the shipped prices, then ``overrides`` on top.

    ``overrides`` maps device names to dollars per device-hour (``{"H100": 2.5}``), or is a
    JSON file: either that mapping, or ``{"prices": [{"chip": ..., "usd_per_device_hour": ...}]}``.
    A name ``"detected"`` prices this machine.
    """
    out = {e["chip"]: e for e in _read(PRICES, "prices")["prices"]}
    if overrides is None:
        return out
    origin = "your prices (argument)"
    if isinstance(overrides, (str, Path)):
        origin = f"your prices ({overrides})"
        overrides = _read(Path(overrides), "prices")
        if "prices" in overrides:
            overrides = {e["chip"]: e for e in overrides["prices"]}
    if not isinstance(overrides, dict):
        raise ValueError(
            f"prices must be a dict such as {{'H100': 2.5}} or a JSON file, got "
            f"{type(overrides).__name__}"
        )
    for name, value in overrides.items():
        key = "detected" if str(name).lower() == "detected" else chip_name(str(name), "prices")
        out[key] = _price_entry(key, value, origin)
    return out


# the chip families the planner's measured error is pooled in
FAMILIES = {"A100": ("A100",), "H100/H200": ("H100", "H200"), "Gaudi": ("Gaudi",)}


def family_of(chip_name: str) -> str:
    """The chip family a chip's error is pooled in: A100, H100/H200 or Gaudi."""
    return next((f for f, prefixes in FAMILIES.items() if chip_name.startswith(prefixes)), "other")
