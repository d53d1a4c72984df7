"""TEST DOUBLE of habana_frameworks.torch.core: ``mark_step``, ``torch.hpu``, ``hpu_backend``.

Source: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/core/__init__.py @ 5a56187:
it registers ``habana_frameworks.torch.hpu`` as ``torch.hpu``, changes torch's functions
(``torch_overwrites``: in lazy mode, module hooks, ``torch.save`` and ``torch.load``) and
imports the torch.compile backend ``hpu_backend``.
"""

import sys

import torch

from habana_frameworks.torch import hpu
from habana_frameworks.torch.utils.internal import is_lazy

from .step_closure import MARKS, mark_step  # noqa: F401
from .torch_overwrites import overwrite_torch_functions

COMPILED: list = []  # test hook (not bridge API): every graph hpu_backend was handed

if getattr(torch, "hpu", None) is not hpu:
    if hasattr(torch, "hpu"):  # a previous copy of the double (tests reload it)
        delattr(torch, "hpu")
    torch._register_device_module("hpu", hpu)

overwrite_torch_functions()  # core/__init__.py:49 @ 5a56187


def _hpu_backend(graph_module, example_inputs, **kwargs):
    """The double's ``hpu_backend``: runs the captured graph as it is (on the CPU), and counts
    a graph compilation for every input signature (shapes, dtypes) the graph first runs with.

    Lazy mode refuses it: optimum-habana asserts "Dynamo and lazy are mutually exclusive"
    (optimum/habana/transformers/training_args.py:664 @ 1d8504c), and the bridge initialises
    its compile backend only in non-lazy mode (core/__init__.py:143 @ 5a56187). The 1.19
    source has no explicit check of its own: how a real lazy-mode compile fails is unverified.

    Counting: a Synapse recipe is compiled for static shapes, and every new input shape
    compiles a new one (HabanaAI/Gaudi-tutorials PyTorch/Detecting_Dynamic_Shapes, "dynamic
    shapes ... cause recompilations"; Intel Gaudi docs, Handling Dynamic Shapes); the
    ``graph_compilation`` metric counts those non-eager compiles
    (backend/synapse_helpers/graph.cpp:614 @ 5a56187). The double keys on what a recipe is
    specialised on that it can see: each tensor input's shape and dtype.
    """
    from habana_frameworks.torch.hpu.metrics import COUNTERS
    from habana_frameworks.torch.utils.internal import is_lazy as lazy_now

    if lazy_now():
        raise RuntimeError("hpu_backend: torch.compile does not run in lazy mode (PT_HPU_LAZY_MODE=1); "
                           "set PT_HPU_LAZY_MODE=0 before the bridge loads")
    current = sys.modules.get(__name__)  # the copy of the double loaded now (tests reload it)
    if current is not None:
        current.COMPILED.append(graph_module)
    signatures: set = set()

    def run(*args):
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else type(a) for a in args)
        if key not in signatures:
            signatures.add(key)
            COUNTERS["graph_compilation"]["TotalNumber"] += 1
        return graph_module.forward(*args)

    return run


def _register_backend() -> None:
    from torch._dynamo.backends.registry import list_backends, register_backend

    if "hpu_backend" not in list_backends(exclude_tags=()):
        register_backend(name="hpu_backend")(_hpu_backend)


_register_backend()
__all__ = ["mark_step", "is_lazy"]
