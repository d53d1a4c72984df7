"""TEST DOUBLE of habana_frameworks.torch.hpex.optimizers (FusedAdamW, on the CPU)."""

import torch

CREATED: list["FusedAdamW"] = []


class FusedAdamW(torch.optim.AdamW):
    """Same signature shape as the bridge's: note eps defaults to 1e-6 there."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, **kw):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        CREATED.append(self)
