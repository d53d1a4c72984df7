"""TEST DOUBLE of habana_frameworks.torch.hpu.metrics: metric_global(name).stats()."""

COUNTERS = {"graph_compilation": {"TotalNumber": 0, "TotalTime": 0, "AvgTime": 0},
            "recipe_cache": {"TotalNumber": 0}, "cpu_fallback": {"TotalNumber": 0}}


class _Metric:
    def __init__(self, name: str):
        self.name = name

    def stats(self) -> list[tuple[str, int]]:
        return list(COUNTERS[self.name].items())


def metric_global(name: str) -> _Metric:
    if name not in COUNTERS:
        raise ValueError(f"unknown metric {name}")
    return _Metric(name)


def fake_compile(n: int = 1) -> None:
    """Test hook (not bridge API): pretend ``n`` graphs were compiled."""
    COUNTERS["graph_compilation"]["TotalNumber"] += n
