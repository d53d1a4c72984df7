"""TEST DOUBLE of habana_frameworks.torch.hpu.graphs (records the calls; captures nothing).

Sources: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/hpu/graphs.py @ 5a56187
(1.19) and its newer copy @ ea38cef (ankurneog/gaudi-pytorch-bridge): ``wrap_in_hpu_graph``
replaces ``module.forward``, captures one graph per new input and replays it; with
``max_graphs`` set, inputs met once the cache holds that many graphs run without one. 1.19
imports this module only in lazy mode (hpu/__init__.py); current bridges import it in every
mode, and ``HPUGraph()`` and the ``graph`` context manager raise outside lazy mode
(@ ea38cef: "HPUGraph class is available in lazy mode only."), so a wrapped module fails on
its first call in eager mode.
"""

from habana_frameworks.torch.utils.internal import is_lazy

# Test hook (not bridge API): (module, the device of its parameters, keyword arguments)
WRAPPED: list[tuple] = []


class HPUGraph:
    def __init__(self):
        if not is_lazy():
            raise RuntimeError("HPUGraph class is available in lazy mode only.")


class graph:  # noqa: N801 (the bridge's name)
    def __init__(self, hpu_graph, stream=None, dry_run=False):
        if not is_lazy():
            raise RuntimeError("Context-manager for HPUGraph is available in lazy mode only.")
        self.hpu_graph = hpu_graph

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def wrap_in_hpu_graph(module, asynchronous=False, disable_tensor_cache=False, dry_run=False, max_graphs=None):
    where = next((str(p.device) for p in module.parameters()), "cpu")
    WRAPPED.append((module, where,
                    {"asynchronous": asynchronous, "disable_tensor_cache": disable_tensor_cache,
                     "dry_run": dry_run, "max_graphs": max_graphs}))
    forward = module.forward

    def wrapped_forward(*args, **kwargs):
        HPUGraph()  # the first capture: refused outside lazy mode (current bridges)
        return forward(*args, **kwargs)

    module.forward = wrapped_forward
    module.clear_cache = lambda: None
    return module
