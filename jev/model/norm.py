"""RMSNorm, computed in float32 whatever the activations' dtype."""

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """`weight * x / sqrt(mean(x^2) + eps)`; the statistics in float32 so bf16 runs stay stable."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight.dtype == torch.float32 and x.dtype == torch.float32:
            # The same formula as below, as one fused op (a decode step normalises 121 times).
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        if self.weight.dtype == torch.float32 and x.dtype == torch.bfloat16:
            # In float32, returned in x's dtype: a bfloat16 branch stays bfloat16.
            return F.rms_norm(x.float(), self.weight.shape, self.weight, self.eps).to(x.dtype)
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)
