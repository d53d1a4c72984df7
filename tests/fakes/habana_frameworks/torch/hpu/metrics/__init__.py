"""TEST DOUBLE of habana_frameworks.torch.hpu.metrics: ``metric_global(name).stats()``.

Source: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/hpu/metrics/metrics.py
@ 5a56187: ``metric_global`` returns None for a name that is not registered; ``stats()`` is a
list of (tag, value) pairs; "recipe_cache" is registered only with PT_HPU_ENABLE_CACHE_METRICS.
"""

import os

_TRUE = ("y", "yes", "t", "true", "on", "1")
COUNTERS = {"graph_compilation": {"TotalNumber": 0, "TotalTime": 0, "AvgTime": 0},
            "cpu_fallback": {"TotalNumber": 0}, "memory_defragmentation": {"TotalNumber": 0},
            "recipe_cache": {"TotalHit": 0, "TotalMiss": 0}}


class _Metric:
    def __init__(self, name: str):
        self._name = name

    def name(self) -> str:
        return self._name

    def stats(self) -> list[tuple[str, int]]:
        return list(COUNTERS[self._name].items())


def metric_global(name: str):
    registered = [n for n in COUNTERS if n != "recipe_cache"]
    if os.getenv("PT_HPU_ENABLE_CACHE_METRICS", "").lower() in _TRUE:
        registered.append("recipe_cache")
    return _Metric(name) if name in registered else None


def fake_compile(n: int = 1, *, eager: bool = False) -> None:
    """Test hook (not bridge API): pretend ``n`` graphs were compiled. Graphs compiled for
    eager execution are not counted: the GRAPH_COMPILE event is emitted only for non-eager
    graphs (backend/synapse_helpers/graph.cpp:614 @ 5a56187)."""
    if not eager:
        COUNTERS["graph_compilation"]["TotalNumber"] += n
