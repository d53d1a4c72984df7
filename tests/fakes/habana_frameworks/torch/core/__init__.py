"""TEST DOUBLE of habana_frameworks.torch.core: ``mark_step``, ``torch.hpu``, ``hpu_backend``.

Source: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/core/__init__.py @ 5a56187:
it registers ``habana_frameworks.torch.hpu`` as ``torch.hpu`` and imports the torch.compile
backend ``hpu_backend``.
"""

import sys

import torch

from habana_frameworks.torch import hpu
from habana_frameworks.torch.utils.internal import is_lazy

from .step_closure import MARKS, mark_step  # noqa: F401

COMPILED: list = []  # test hook (not bridge API): every graph hpu_backend was handed

if getattr(torch, "hpu", None) is not hpu:
    if hasattr(torch, "hpu"):  # a previous copy of the double (tests reload it)
        delattr(torch, "hpu")
    torch._register_device_module("hpu", hpu)


def _hpu_backend(graph_module, example_inputs, **kwargs):
    """The double's ``hpu_backend``: runs the captured graph as it is (on the CPU).

    Lazy mode refuses it: optimum-habana asserts "Dynamo and lazy are mutually exclusive"
    (optimum/habana/transformers/training_args.py:664 @ 1d8504c), and the bridge initialises
    its compile backend only in non-lazy mode (core/__init__.py:143 @ 5a56187). The 1.19
    source has no explicit check of its own: how a real lazy-mode compile fails is unverified.
    """
    from habana_frameworks.torch.utils.internal import is_lazy as lazy_now

    if lazy_now():
        raise RuntimeError("hpu_backend: torch.compile does not run in lazy mode (PT_HPU_LAZY_MODE=1); "
                           "set PT_HPU_LAZY_MODE=0 before the bridge loads")
    current = sys.modules.get(__name__)  # the copy of the double loaded now (tests reload it)
    if current is not None:
        current.COMPILED.append(graph_module)
    return graph_module.forward


def _register_backend() -> None:
    from torch._dynamo.backends.registry import list_backends, register_backend

    if "hpu_backend" not in list_backends(exclude_tags=()):
        register_backend(name="hpu_backend")(_hpu_backend)


_register_backend()
__all__ = ["mark_step", "is_lazy"]
