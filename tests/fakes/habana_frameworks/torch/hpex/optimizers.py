"""TEST DOUBLE of habana_frameworks.torch.hpex.optimizers.FusedAdamW (the bridge's math, on the CPU).

Source: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/hpex/optimizers/FusedAdamW.py
@ 5a56187: the exact signature below (a keyword it does not list is a TypeError), the same
argument checks, and in lazy mode a mark_step before each parameter group and after the step.
The update is the wrapper's and its kernel's (``hpu_ops/backend/optimizer_adamw_gen.cpp``), not
torch's AdamW: the step count is the parameter group's (``group["step"]``); bias correction is
folded into the step size, ``lr * sqrt(1 - beta2**t) / (1 - beta1**t)`` (torch divides the
second moment's root by its correction before adding ``eps``, so here ``eps`` is not
corrected); decoupled weight decay multiplies the weight by ``1 - weight_decay * lr`` before
the update; the moments are the parameter's dtype.
"""

import math

import torch

from habana_frameworks import _counts
from habana_frameworks.torch.core.step_closure import _mark_step_if_lazy

CREATED: list["FusedAdamW"] = []  # test hook (not bridge API)


class FusedAdamW(torch.optim.Optimizer):
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
        if moments_dtype is not None:
            raise NotImplementedError("the test double implements moments_dtype=None only")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      bias_correction=bias_correction))
        CREATED.append(self)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:  # the closure is the user's code (counted); the update is
            with torch.enable_grad():  # one fused kernel on a Gaudi (not counted)
                loss = closure()
        for group in self.param_groups:
            _mark_step_if_lazy()
            with _counts.kernel():
                self._group_step(group)
        _mark_step_if_lazy()
        return loss

    def _group_step(self, group):
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        beta1, beta2 = group["betas"]
        group["step"] = group.get("step", 0) + 1  # the group's count, as the wrapper keeps it
        step_size = group["lr"]
        # "bias_correction", or "correct_bias" of an old checkpoint, or True (is_bias_correction)
        if group.get("bias_correction", group.get("correct_bias", True)):
            step_size *= math.sqrt(1.0 - beta2 ** group["step"]) / (1.0 - beta1 ** group["step"])
        decay = 1.0 - group["weight_decay"] * group["lr"]
        for p in params:
            if p.grad.is_sparse:
                raise RuntimeError("Adam does not support sparse gradients, please consider SparseAdam")
            state = self.state[p]
            if not state:
                state["step"] = 0  # the wrapper sets it and never advances it
                state["exp_avg"] = torch.zeros_like(p)
                state["exp_avg_sq"] = torch.zeros_like(p)
            grad, m, v = p.grad, state["exp_avg"], state["exp_avg_sq"]
            m.mul_(beta1).add_(grad * (1.0 - beta1))
            v.mul_(beta2).add_(grad * grad * (1.0 - beta2))
            ratio = m / (v.sqrt() + group["eps"])
            if decay != 1.0:
                p.mul_(decay)
            p.add_(ratio * -step_size)
