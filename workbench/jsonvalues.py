"""Values made JSON-safe, and the one table of what a number JSON cannot hold becomes.

JSON has no NaN or infinity. Each place that writes JSON says which rule it follows, by name:

- ``"text"``: the run's files (``summary.json``, ``events.jsonl``, ``spec.json``) keep what
  happened: a loss that became NaN is written ``"nan"``, so a reader sees it was NaN.
- ``"null"``: what a browser parses (``JSON.parse`` refuses NaN): the chart draws a gap.
- ``"refuse"``: ``wb.record`` keeps a value for a notebook's reader to compare: a NaN there
  is a mistake to name, not a value to keep.

Tensors and numpy scalars (anything 0-dimensional with ``.item()``) become Python numbers.
"""

from __future__ import annotations

import math
from typing import Any, Literal

NONFINITE = ("text", "null", "refuse")


def plain(value: Any, nonfinite: Literal["text", "null", "refuse"]) -> Any:
    """``value`` with dicts, lists and tuples walked, 0-d scalars made Python numbers and
    non-finite floats handled by the ``nonfinite`` rule (the module docstring's)."""
    if nonfinite not in NONFINITE:
        raise ValueError(f"unknown nonfinite rule {nonfinite!r}; known: {', '.join(NONFINITE)}")
    return _plain(value, nonfinite)


def _plain(value: Any, rule: str) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v, rule) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, rule) for v in value]
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        if rule == "refuse":
            raise ValueError(f"cannot record {value!r}: it is not a finite number")
        return None if rule == "null" else str(value)
    return value
