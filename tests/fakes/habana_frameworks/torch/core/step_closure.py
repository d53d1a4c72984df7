"""TEST DOUBLE of habana_frameworks.torch.core.step_closure: ``mark_step``.

Source: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/core/step_closure.py
@ 5a56187. ``mark_step`` is decorated with ``lazy_only``: in eager mode it does nothing.
"""

import sys

from habana_frameworks import _counts
from habana_frameworks.torch.utils.internal import is_lazy, lazy_only

# Test hook (not bridge API): one entry per mark_step that ran, naming the module that
# called it ("habana_frameworks.torch.hpex..." for the fused ops' own calls).
MARKS: list[str] = []


def _caller() -> str:
    frame = sys._getframe(3)  # mark_step <- lazy_wrapper <- [_mark_step_if_lazy] <- caller
    while frame is not None and frame.f_globals.get("__name__") in (__name__, "habana_frameworks.torch.utils.internal"):
        frame = frame.f_back
    return frame.f_globals.get("__name__", "?") if frame is not None else "?"


@lazy_only
def mark_step(device_str="", sync=False):
    MARKS.append(_caller())
    _counts.flush()  # the accumulated graph runs (a new signature compiles: _counts.py)


def _mark_step_if_lazy(device_str=""):
    # what the fused ops call around their kernels (step_closure.py @ 5a56187)
    if is_lazy():
        mark_step(device_str)
