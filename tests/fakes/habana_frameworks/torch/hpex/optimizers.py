"""TEST DOUBLE of habana_frameworks.torch.hpex.optimizers.FusedAdamW (torch's AdamW math, on the CPU).

Source: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/hpex/optimizers/FusedAdamW.py
@ 5a56187: the exact signature below (a keyword it does not list is a TypeError), the same
argument checks, decoupled weight decay as ``1 - weight_decay * lr`` per parameter group, and
in lazy mode a mark_step before each parameter group and after the step.
"""

import torch

from habana_frameworks import _counts
from habana_frameworks.torch.core.step_closure import _mark_step_if_lazy

CREATED: list["FusedAdamW"] = []  # test hook (not bridge API)


class FusedAdamW(torch.optim.AdamW):
    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0, bias_correction: bool = True, moments_dtype=None):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr} - should be >= 0.0")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter: {betas[0]} - should be in [0.0, 1.0[")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter: {betas[1]} - should be in [0.0, 1.0[")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps} - should be >= 0.0")
        if not bias_correction or moments_dtype is not None:
            raise NotImplementedError("the test double implements bias_correction=True, moments_dtype=None only")
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        for group in self.param_groups:
            group.setdefault("bias_correction", bias_correction)
        CREATED.append(self)

    @torch.no_grad()
    def step(self, closure=None):
        for _ in self.param_groups:
            _mark_step_if_lazy()
        if closure is not None:  # the closure is the user's code (counted); the update is
            with torch.enable_grad():  # one fused kernel on a Gaudi (not counted)
                loss = closure()
        else:
            loss = None
        with _counts.kernel():
            super().step()
        _mark_step_if_lazy()
        return loss
