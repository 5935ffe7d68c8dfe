"""The one-pass decision: `[input tokens][one query token per closed field]` through the backbone.

Training and inference share this module, so the layout the heads were trained on is exactly the
layout they are served with. Each row of a batch holds its own input length; its field tokens sit
right after its last input token and padding goes after them.
"""

from collections.abc import Sequence

import torch
from torch import nn

from jev.model import Model
from jev.model.heads import TaskHeads


class DecisionModel(nn.Module):
    """The language model plus every task's heads: one module for the optimizer, DDP and the checkpoint."""

    def __init__(self, model: Model, heads: dict[str, TaskHeads]) -> None:
        super().__init__()
        self.model = model
        self.heads = nn.ModuleDict(heads)

    def forward(
        self, task: str, token_ids: Sequence[Sequence[int]], *, training: bool = False
    ) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        """Logits per field `[B, n_outputs]` for a batch of tokenised inputs of any lengths.

        With `training=True` attention stays dense and the DSA indexers' KL loss is returned too;
        otherwise the indexer's top-k selection is used and the second value is None.
        """
        heads: TaskHeads = self.heads[task]
        embeds, lengths, field_positions = self.layout(heads, token_ids)
        if training:
            hidden, indexer_loss = self.model.training_states(inputs_embeds=embeds, lengths=lengths)
        else:
            hidden, indexer_loss = self.model.hidden_states(inputs_embeds=embeds, lengths=lengths), None
        rows = torch.arange(len(token_ids), device=hidden.device).unsqueeze(1)
        return heads(hidden[rows, field_positions]), indexer_loss

    def layout(
        self, heads: TaskHeads, token_ids: Sequence[Sequence[int]]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Embeddings `[B, W, D]` with each row's field queries after its input, total lengths `[B]`,
        and the field tokens' positions `[B, F]`."""
        if not token_ids or any(len(ids) == 0 for ids in token_ids):
            raise ValueError("every input needs at least one token")
        device = heads.queries.device
        n_fields = heads.queries.shape[0]
        input_lengths = torch.tensor([len(ids) for ids in token_ids], device=device)
        width = int(input_lengths.max()) + n_fields
        padded = torch.zeros(len(token_ids), width, dtype=torch.long, device=device)
        for row, ids in enumerate(token_ids):
            padded[row, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
        field_positions = input_lengths.unsqueeze(1) + torch.arange(n_fields, device=device)
        rows = torch.arange(len(token_ids), device=device).unsqueeze(1).expand_as(field_positions)
        embeds = self.model.embed(padded)
        queries = heads.queries.to(embeds.dtype).expand(len(token_ids), -1, -1)
        embeds = embeds.index_put((rows, field_positions), queries)
        return embeds, input_lengths + n_fields, field_positions
