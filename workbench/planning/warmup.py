"""The warm-up of a run: the one-off seconds it spends beyond its steady rate (on a Gaudi the
graph compilation of its first steps and of each new shape), as the chip's published runs
show it.

A reference that states its whole run (``run``: samples, ``train_runtime`` and the steady
samples/s, optimum-habana's CI baselines) spent ``runtime - samples / samples_per_s`` seconds
beyond its steady rate. A chip's warm-up is the median of its references' (their spread said
beside it); ``wb.plan`` adds it once to the time of a run, so a short run (a GLUE fine-tune of
a few dozen steps) takes what it takes, and a long one is unchanged. A chip without such a
reference (the NVIDIA GPUs: eager mode compiles no graph) has none.
"""

from __future__ import annotations

import statistics
from typing import Any


def spent(entry: dict) -> float | None:
    """Seconds a reference's whole run took beyond its steady rate; None where it states none."""
    run = entry.get("run")
    if not run:
        return None
    return run["runtime_s"] - run["samples"] / run["samples_per_s"]


def warmup_of(data: dict, found) -> dict[str, Any]:
    """``seconds`` (the median warm-up of the chip's references that state their whole run;
    0 without one) and ``source`` (how many, their range, where from)."""
    name = getattr(found, "name", None)
    runs = [(e, s) for e in data["mfu"] if e["chip"] == name and (s := spent(e)) is not None]
    if not runs:
        return {"seconds": 0.0, "source": ""}
    seconds = [s for _, s in runs]
    e = runs[0][0]
    return {
        "seconds": statistics.median(seconds),
        "source": (
            f"{statistics.median(seconds):.0f} s once: the median of {len(runs)} published "
            f"{name} runs' time beyond their steady rate (train_runtime - samples / "
            f"train_samples_per_second: graph compilation of the first steps and of new "
            f"shapes; {min(seconds):.0f}-{max(seconds):.0f} s); {e['source']}, {e['url']} "
            f"(read {e['read']})"
        ),
    }
