"""AdamW with weight decay on matrices only, and the warm-up + cosine learning-rate schedule."""

import math

import torch
from torch import nn


def build_optimizer(model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float]) -> torch.optim.AdamW:
    """AdamW where only matrices (projections, embeddings) decay.

    Decaying norm gains would pull them towards zero and shrink every activation; matrices are
    where decay regularises.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas)


def lr_at(step: int, peak: float, warmup: int, total: int, floor_ratio: float = 0.1) -> float:
    """Learning rate of 0-based `step`: linear rise over `warmup` steps, cosine down to `floor_ratio * peak`."""
    if step < warmup:
        return peak * (step + 1) / warmup
    floor = peak * floor_ratio
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * progress))
