"""TEST DOUBLE of habana_frameworks.torch.hpex.normalization.FusedClipNorm (on the CPU)."""

import torch

CALLS: list[float] = []


class FusedClipNorm:
    def __init__(self, parameters, max_norm):
        self.max_norm = max_norm

    def clip_norm(self, parameters):
        norm = torch.nn.utils.clip_grad_norm_(list(parameters), self.max_norm)
        CALLS.append(float(norm))
        return norm
