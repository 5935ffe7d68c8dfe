"""Decision heads: one learned query token per closed field and a linear read-out of its state.

The query tokens are appended after the input, so each one attends (through MLA + DSA) to the
input and to the field tokens before it; its last hidden state is projected to the field's
values. A whole decision is therefore one forward pass, whatever the number of fields.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class HeadLayout:
    """What one head outputs: `n_outputs` logits, a softmax over them or independent sigmoids."""

    name: str
    n_outputs: int
    multilabel: bool


class TaskHeads(nn.Module):
    """The query embeddings `[F, D]` and heads of one task's closed fields, in the spec's order."""

    def __init__(self, hidden_size: int, fields: Sequence[HeadLayout]) -> None:
        super().__init__()
        if not fields:
            raise ValueError("a task needs at least one closed field to decide")
        self.fields = tuple(fields)
        self.queries = nn.Parameter(torch.randn(len(fields), hidden_size) * 0.02)
        self.heads = nn.ModuleList(nn.Linear(hidden_size, field.n_outputs) for field in fields)

    def forward(self, field_states: torch.Tensor) -> list[torch.Tensor]:
        """`field_states [B, F, D]` -> one logits tensor `[B, n_outputs]` per field."""
        return [head(field_states[:, i]) for i, head in enumerate(self.heads)]

    def probabilities(self, logits: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Softmax for single-choice fields; P(label in set) by sigmoid for multi-label ones."""
        return [
            torch.sigmoid(x) if field.multilabel else torch.softmax(x, dim=-1)
            for field, x in zip(self.fields, logits, strict=True)
        ]
