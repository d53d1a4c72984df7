"""TEST DOUBLE of habana_frameworks.torch.hpu.graphs.wrap_in_hpu_graph (records the call).

Source: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/hpu/graphs.py @ 5a56187:
the wrapper replaces ``module.forward``, captures one graph per new input and replays it;
with ``max_graphs`` set, inputs met once the cache holds that many graphs run without one.
It is importable from ``habana_frameworks.torch.hpu`` only in lazy mode (see hpu/__init__.py).
"""

# Test hook (not bridge API): (module, the device of its parameters, keyword arguments)
WRAPPED: list[tuple] = []


def wrap_in_hpu_graph(module, asynchronous=False, disable_tensor_cache=False, dry_run=False, max_graphs=None):
    where = next((str(p.device) for p in module.parameters()), "cpu")
    WRAPPED.append((module, where,
                    {"asynchronous": asynchronous, "disable_tensor_cache": disable_tensor_cache,
                     "dry_run": dry_run, "max_graphs": max_graphs}))
    module.clear_cache = lambda: None
    return module
