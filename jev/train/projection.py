"""Keep a secondary loss from undoing a primary one: gradient projection for the answer objective.

With `--project-answer`, decision fine-tuning takes the gradient of the decision loss (heads and
indexer) and the gradient of the answer loss separately. When they point against each other (a
negative dot product over all parameters), the answer gradient loses its component along the
decision gradient before the two are added, so to first order an answer step never raises the
decision loss (PCGrad, Yu et al. 2020, with the decision loss kept whole). The gradients are
averaged over ranks before the projection, so every rank applies the same step.
"""

from collections.abc import Sequence

import torch
from torch import nn

from jev.train.distributed import Distributed


def gradients(loss: torch.Tensor, params: Sequence[nn.Parameter], retain_graph: bool) -> list[torch.Tensor | None]:
    """d loss / d param for each parameter; None for those the loss does not reach."""
    return list(torch.autograd.grad(loss, params, retain_graph=retain_graph, allow_unused=True))


def flatten(grads: Sequence[torch.Tensor | None], params: Sequence[nn.Parameter]) -> torch.Tensor:
    pairs = zip(grads, params, strict=True)
    return torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in pairs])


def project_conflict(primary: torch.Tensor, secondary: torch.Tensor) -> torch.Tensor:
    """`secondary` without its component along `primary` when the two conflict, else unchanged."""
    dot = torch.dot(primary, secondary)
    norm = torch.dot(primary, primary)
    if dot >= 0 or norm == 0:
        return secondary
    return secondary - (dot / norm) * primary


def set_projected_gradients(
    params: Sequence[nn.Parameter], primary_loss: torch.Tensor, secondary_loss: torch.Tensor, ddp: Distributed
) -> bool:
    """Write primary + projected secondary gradient into `.grad` of every parameter either loss
    reaches (the others keep None, so the optimizer skips them as in a plain backward); True if it
    projected."""
    first = gradients(primary_loss, params, retain_graph=True)
    second = gradients(secondary_loss, params, retain_graph=False)
    primary = ddp.all_reduce_mean(flatten(first, params))
    secondary = ddp.all_reduce_mean(flatten(second, params))
    projected = project_conflict(primary, secondary)
    total = primary + projected
    offset = 0
    for param, a, b in zip(params, first, second, strict=True):
        if a is not None or b is not None:
            param.grad = total[offset : offset + param.numel()].view_as(param).clone()
        offset += param.numel()
    return projected is not secondary
