"""TEST DOUBLE of habana_frameworks.torch.hpex.normalization.FusedClipNorm (on the CPU).

Source: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/hpex/normalization/
FusedClipNorm.py @ 5a56187: ``FusedClipNorm(parameters, max_norm)``; ``clip_norm(parameters)``
clips the gradients to ``max_norm`` in place, returns the total norm before clipping (a zero
tensor when no parameter has a gradient), and in lazy mode runs mark_step before and after.
"""

import torch

from habana_frameworks import _counts
from habana_frameworks.torch.core.step_closure import _mark_step_if_lazy

CALLS: list[float] = []  # test hook (not bridge API): every norm computed


class FusedClipNorm:
    def __init__(self, parameters, max_norm):
        self.max_norm = float(max_norm)
        self.norm_type = 2.0

    def clip_norm(self, parameters):
        _mark_step_if_lazy()
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        params = [p for p in parameters if p.grad is not None]
        if not params:
            return torch.tensor(0.0)
        with _counts.kernel():  # one fused kernel on a Gaudi; CALLS is a test hook's read
            norm = torch.nn.utils.clip_grad_norm_(params, self.max_norm, self.norm_type)
            CALLS.append(float(norm))
        _mark_step_if_lazy()
        return norm
