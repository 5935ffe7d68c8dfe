"""The one-pass decision: `[input tokens][one query token per closed field]` through the backbone.

Training and inference share this module, so the layout the heads were trained on is exactly the
layout they are served with. Each row of a batch holds its own input length; its field tokens sit
right after its last input token and padding goes after them.

Training may also teach the language model to write the answer (`answers`): a second pass over
`[input tokens][answer tokens]`, without the query tokens, because a generative reader of the same
weights (Outlines on transformers, or Jev's own text fields after the decision) sees plain text.
The loss is the mean next-token cross-entropy over the answer tokens. That pass may leave the
weights of the lowest layers to the decision objective (`answer_frozen_layers`): writing the labels
as text then cannot reshape the features the heads read there.
"""

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from jev.model import LatentCache, Model
from jev.model.heads import TaskHeads


class DecisionOutputs(NamedTuple):
    """Logits per closed field `[B, n_outputs]`; in training, the indexers' KL loss and (with
    answers) the answer's language-modelling loss."""

    logits: list[torch.Tensor]
    indexer_loss: torch.Tensor | None = None
    answer_loss: torch.Tensor | None = None


class DecisionModel(nn.Module):
    """The language model plus every task's heads: one module for the optimizer, DDP and the checkpoint."""

    def __init__(self, model: Model, heads: dict[str, TaskHeads]) -> None:
        super().__init__()
        self.model = model
        self.heads = nn.ModuleDict(heads)

    def forward(
        self,
        task: str,
        token_ids: Sequence[Sequence[int]],
        *,
        training: bool = False,
        answers: Sequence[Sequence[int]] | None = None,
        answer_frozen_layers: int = 0,
        cache: LatentCache | None = None,
    ) -> DecisionOutputs:
        """Logits per field for a batch of tokenised inputs of any lengths.

        With `training=True` attention stays dense and the DSA indexers' KL loss on this pass is
        returned too (the answer pass, when `answers` are given, adds none, and the weights of its
        lowest `answer_frozen_layers` layers learn nothing from it); otherwise the indexer's top-k
        selection is used and `cache`, if given, receives every row's inputs and field tokens.
        """
        heads: TaskHeads = self.heads[task]
        embeds, lengths, field_positions = self.layout(heads, token_ids)
        if training:
            hidden, indexer_loss = self.model.training_states(inputs_embeds=embeds, lengths=lengths)
        else:
            hidden = self.model.hidden_states(inputs_embeds=embeds, lengths=lengths, cache=cache)
            indexer_loss = None
        rows = torch.arange(len(token_ids), device=hidden.device).unsqueeze(1)
        logits = heads(hidden[rows, field_positions])
        if answers is None:
            return DecisionOutputs(logits, indexer_loss)
        return DecisionOutputs(logits, indexer_loss, self.answer_loss(token_ids, answers, answer_frozen_layers))

    def answer_loss(
        self, token_ids: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], frozen_layers: int = 0
    ) -> torch.Tensor:
        """Mean cross-entropy of each answer's tokens after its input (dense attention); the weights of
        the lowest `frozen_layers` layers learn nothing from it.

        The indexers do not learn from this pass: averaging its KL loss with the decision pass's
        made their top-k selection worse for the heads (over three seeds mail `kind` lost 1.2
        points on test under the served top-k and none under dense attention), and the decision
        pass is what Jev serves.
        """
        device = self.model.device
        rows = [[*ids, *answer] for ids, answer in zip(token_ids, answers, strict=True)]
        lengths = torch.tensor([len(r) for r in rows], device=device)
        padded = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long, device=device)
        for row, ids in enumerate(rows):
            padded[row, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
        hidden, _ = self.model.training_states(padded, lengths=lengths, frozen_layers=frozen_layers)
        row_index = torch.cat([torch.full((len(a),), r) for r, a in enumerate(answers)]).to(device)
        target_pos = torch.cat([torch.arange(len(t), len(t) + len(a)) for t, a in zip(token_ids, answers, strict=True)])
        target_pos = target_pos.to(device)
        logits = self.model.lm_head(hidden[row_index, target_pos - 1])
        return F.cross_entropy(logits.float(), padded[row_index, target_pos])

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
