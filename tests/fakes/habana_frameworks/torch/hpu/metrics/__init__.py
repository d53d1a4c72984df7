"""TEST DOUBLE of habana_frameworks.torch.hpu.metrics: ``metric_global``, ``metric_localcontext``.

Source: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/hpu/metrics/metrics.py
@ 5a56187. The manager registers ``graph_compilation``, ``cpu_fallback`` and
``memory_defragmentation`` when the module is imported (``hpu/__init__.py`` imports it, so
when the bridge loads), and ``recipe_cache`` only with PT_HPU_ENABLE_CACHE_METRICS;
``metric_global(name)`` is None for a name that is not registered; ``metric_localcontext(name)``
yields a new metric of that kind that counts from entering the block and stops at its end
(``MetricNotFound`` for an unknown name); ``stats()`` is a list of (tag, value) pairs, each
metric's tags in the bridge's order; ``reset()`` zeroes a metric; ``metrics_dump(file_name,
format)`` writes the global metrics to a new file as ``saver.py`` does (see ``saver``).

Where the numbers come from here (``habana_frameworks/_counts.py``, tests/fakes/README.md):
``cpu_fallback`` counts the ops that reached the emulated device and have no HPU kernel in the
bridge's op table; ``graph_compilation`` counts ``hpu_backend``'s compiles (one per new input
signature) and, in lazy mode, each distinct graph signature run at a mark_step or a host sync.
Compile times are not emulated (``TotalTime`` and ``AvgTime`` stay 0).
"""

import os
from contextlib import contextmanager

from habana_frameworks import _counts

from . import saver
from .exceptions import MetricNotFound
from .saver import MetricDumpFormat

_TRUE = ("y", "yes", "t", "true", "on", "1")
# Python-side accumulators (hpu_backend's compiles, fake_compile); a name missing here is a
# metric the bridge did not register (tests remove one to stand for an older bridge)
COUNTERS = {"graph_compilation": {"TotalNumber": 0}, "cpu_fallback": {},
            "memory_defragmentation": {}, "recipe_cache": {}}


def _totals(name: str) -> dict:
    """Everything counted for metric ``name`` since the process started."""
    if name == "graph_compilation":
        return {"TotalNumber": COUNTERS["graph_compilation"]["TotalNumber"]
                + _counts.raw()["lazy_graphs"]}
    if name == "cpu_fallback":
        return {"FallbackOps": _counts.fallbacks(_counts.raw()["ops"])}
    return {}


def _minus(now: dict, base: dict) -> dict:
    out = {}
    for key, value in now.items():
        if isinstance(value, dict):
            d = {k: v - base.get(key, {}).get(k, 0) for k, v in value.items()}
            out[key] = {k: v for k, v in d.items() if v}
        else:
            out[key] = value - base.get(key, 0)
    return out


class _Metric:
    """One metric: counts from its start (or last reset) until ``stop()``."""

    def __init__(self, name: str):
        self._name = name
        self._base = _totals(name)
        self._frozen = None

    def name(self) -> str:
        return self._name

    def _now(self) -> dict:
        return self._frozen if self._frozen is not None else _minus(_totals(self._name), self._base)

    def start(self) -> None:
        if self._frozen is not None:  # counting resumes from what it had
            self._base = _minus(_totals(self._name), self._frozen)
            self._frozen = None

    def stop(self) -> None:
        if self._frozen is None:
            self._frozen = self._now()

    def reset(self) -> None:
        self._base, self._frozen = _totals(self._name), None

    def stats(self) -> list:
        c = self._now()
        if self._name == "graph_compilation":  # GraphCompilationMetric.stats
            n = c["TotalNumber"]
            return [("TotalNumber", n), ("TotalTime", 0), ("AvgTime", 0.0 if n else 0)]
        if self._name == "cpu_fallback":  # CpuFallbackMetric.stats
            ops = c["FallbackOps"]
            return [("TotalNumber", sum(ops.values())), ("FallbackOps", dict(ops))]
        if self._name == "memory_defragmentation":  # never happens on host memory
            return [("TotalNumber", 0), ("TotalSuccessful", 0), ("AvgTime", 0), ("MaxTime", 0)]
        return [("TotalHit", 0), ("RecipeHit", {}), ("TotalMiss", 0), ("RecipeMiss", {})]


def _registered() -> list[str]:
    names = [n for n in ("graph_compilation", "cpu_fallback", "memory_defragmentation")
             if n in COUNTERS]
    if os.getenv("PT_HPU_ENABLE_CACHE_METRICS", "").lower() in _TRUE and "recipe_cache" in COUNTERS:
        names.append("recipe_cache")
    return names


_GLOBAL: dict = {}  # one global metric per name, counting from the bridge's load


def _global(name: str) -> _Metric:
    if name not in _GLOBAL:
        _GLOBAL[name] = _Metric(name)
    return _GLOBAL[name]


for _name in ("graph_compilation", "cpu_fallback", "memory_defragmentation", "recipe_cache"):
    _global(_name)  # the manager creates them when it is imported (_init_metric_mgr)


def metric_global(name: str):
    """The global metric ``name``; None if it is not registered."""
    return _global(name) if name in _registered() else None


@contextmanager
def metric_localcontext(name: str):
    """A metric of kind ``name`` counting inside the block (MetricNotFound if unknown)."""
    if name not in _registered():
        raise MetricNotFound(f"Metric with given name ({name}) doesn't exist.")
    metric = _Metric(name)
    try:
        yield metric
    finally:
        metric.stop()


def metrics_dump(file_name: str, format: MetricDumpFormat = MetricDumpFormat.json) -> None:
    """Write the global metrics, each registered one in registration order, to a new file
    (metrics.py @ 5a56187 and @ ea38cef: ``store_global_metrics`` with the trigger ``user``;
    the file's name and format: ``saver.py``, see the double's ``saver``)."""
    saver.dump(file_name, format, [_global(name) for name in _registered()])


def fake_compile(n: int = 1, *, eager: bool = False) -> None:
    """Test hook (not bridge API): pretend ``n`` graphs were compiled. Graphs compiled for
    eager execution are not counted: the GRAPH_COMPILE event is emitted only for non-eager
    graphs (backend/synapse_helpers/graph.cpp:614 @ 5a56187)."""
    if not eager:
        COUNTERS["graph_compilation"]["TotalNumber"] += n


def fake_counts() -> dict:
    """Test hook (not bridge API): the device's counts since the process started: ``ops``
    (every op that reached the device, by name), ``fallbacks`` (those without an HPU kernel),
    ``unlisted`` (those the op table does not know), ``host_syncs`` (by cause) and
    ``graphs`` (compiled graphs: lazy signatures and hpu_backend's)."""
    raw = _counts.raw()
    return {"ops": raw["ops"], "fallbacks": _counts.fallbacks(raw["ops"]),
            "unlisted": _counts.unlisted(raw["ops"]), "host_syncs": _counts.host_syncs(raw),
            "graphs": _totals("graph_compilation")["TotalNumber"]}
