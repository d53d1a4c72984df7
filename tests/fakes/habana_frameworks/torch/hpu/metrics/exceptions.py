"""TEST DOUBLE of habana_frameworks.torch.hpu.metrics.exceptions (metrics/exceptions.py
@ 5a56187): the error ``metric_localcontext`` raises for an unknown metric."""


class MetricNotFound(Exception):
    pass
