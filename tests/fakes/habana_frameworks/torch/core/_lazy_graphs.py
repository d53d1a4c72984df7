"""TEST DOUBLE's count of lazy-mode graphs (test hook, not bridge API).

In lazy mode the bridge accumulates the ops a program issues into a graph until ``mark_step``
and compiles a recipe for each graph it has not seen: a graph is keyed by its ops and their
inputs' shapes and dtypes, so a new shape compiles a new recipe and a repeated one is a cache
hit (Intel's "Handling Dynamic Shapes" guide, and Gaudi-tutorials' Detecting_Dynamic_Shapes,
which counts these compilations with ``metric_global("graph_compilation")``). A generation
loop whose inputs grow by a token per step therefore compiles a graph per token; one with
static shapes compiles one per shape bucket.

``trace(True)`` makes the double do this bookkeeping: a ``TorchFunctionMode`` folds each torch
call (its name, its tensors' shapes and dtypes, its other plain arguments) into the open
graph's key; ``mark_step`` closes the graph, and a key not seen before counts one
``graph_compilation`` (``metrics.fake_compile``) and is kept in ``GRAPHS``. Calls are torch's
Python-level functions, not the bridge's aten ops: the count of distinct graphs is what it
emulates, not their contents. Off by default (it slows every op).
"""

import torch
from torch.overrides import TorchFunctionMode

GRAPHS: dict[int, int] = {}  # graph key -> how many times it ran
_state: dict = {"mode": None, "key": []}


def _plain(value):
    if isinstance(value, torch.Tensor):
        return ("T", tuple(value.shape), str(value.dtype))
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if isinstance(value, (int, float, bool, str, type(None), torch.dtype, torch.Size)):
        return value
    return type(value).__name__


# reads of what is on the device (they wait for a graph, they are not in one) and attribute
# lookups (``__get__``: a tensor property such as ``.device``)
_NOT_OPS = {"__get__", "item", "cpu", "tolist", "numpy", "size", "dim", "numel", "__len__",
            "__bool__", "__format__", "__repr__", "__hash__", "data_ptr"}


def _on_hpu(value) -> bool:
    if isinstance(value, torch.Tensor):
        return value.device.type == "hpu"
    if isinstance(value, (list, tuple)):
        return any(_on_hpu(v) for v in value)
    return False


class _Trace(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # a call on device tensors is part of the graph; host work and the copies that bring
        # inputs to the device (a host tensor or plain values in) are not
        name = getattr(func, "__name__", str(func))
        if name not in _NOT_OPS and (_on_hpu(args) or _on_hpu(list(kwargs.values()))):
            _state["key"].append((name, _plain(args),
                                  _plain(tuple(sorted(kwargs.items())))))
        return func(*args, **kwargs)


def trace(on: bool) -> None:
    """Start (True) or stop (False) counting lazy graphs in this process."""
    if on and _state["mode"] is None:
        _state["mode"] = _Trace()
        _state["mode"].__enter__()
        _state["key"] = []
    elif not on and _state["mode"] is not None:
        _state["mode"].__exit__(None, None, None)
        _state["mode"] = None


def close_graph() -> None:
    """What ``mark_step`` does with the open graph while tracing."""
    if _state["mode"] is None or not _state["key"]:
        return
    key = hash(tuple(_state["key"]))
    _state["key"] = []
    if key not in GRAPHS:
        from habana_frameworks.torch.hpu.metrics import fake_compile

        fake_compile(1)
    GRAPHS[key] = GRAPHS.get(key, 0) + 1
