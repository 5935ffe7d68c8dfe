"""The one-pass decision: `[input tokens][one query token per closed field]` through the backbone.

Training and inference share this module, so the layout the heads were trained on is exactly the
layout they are served with. Each row of a batch holds its own input length; its field tokens sit
right after its last input token and padding goes after them. The field tokens may join at a
higher layer (`query_layer`): the layers below it then read the input alone.

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
from jev.ragged import pad_rows, pad_states


class DecisionOutputs(NamedTuple):
    """Logits per closed field `[B, n_outputs]`; in training, the indexers' KL loss and (with
    answers) the answer's language-modelling loss; with a cache, the inputs' final hidden states
    `[B, W, D]` (row b's first `len(token_ids[b])` columns), which a drafter reading the target's
    states drafts the text fields from."""

    logits: list[torch.Tensor]
    indexer_loss: torch.Tensor | None = None
    answer_loss: torch.Tensor | None = None
    input_states: torch.Tensor | None = None


class DecisionModel(nn.Module):
    """The language model plus every task's heads: one module for the optimizer, DDP and the checkpoint.

    The field queries join the input's states at layer `query_layer` (0: with the token embeddings).
    The input's states below that layer then never depend on the task, so a fine-tuning run that
    freezes those layers computes them once per row (`lower_states`) and trains only the layers above.
    """

    def __init__(self, model: Model, heads: dict[str, TaskHeads], query_layer: int = 0) -> None:
        super().__init__()
        if not 0 <= query_layer < model.config.num_hidden_layers:
            raise ValueError(f"query_layer must be 0..{model.config.num_hidden_layers - 1}, got {query_layer}")
        self.model = model
        self.heads = nn.ModuleDict(heads)
        self.query_layer = query_layer

    def forward(
        self,
        task: str,
        token_ids: Sequence[Sequence[int]],
        *,
        training: bool = False,
        answers: Sequence[Sequence[int]] | None = None,
        answer_frozen_layers: int = 0,
        cache: LatentCache | None = None,
        lower_states: Sequence[torch.Tensor] | None = None,
    ) -> DecisionOutputs:
        """Logits per field for a batch of tokenised inputs of any lengths.

        With `training=True` attention stays dense and the DSA indexers' KL loss on this pass is
        returned too (the answer pass, when `answers` are given, adds none, and the weights of its
        lowest `answer_frozen_layers` layers learn nothing from it); otherwise the indexer's top-k
        selection is used and `cache`, if given, receives every row's inputs (and, from `query_layer`
        up, its field tokens, which a caller rolls back before writing text). `lower_states[r]`,
        when given, holds row r's states `[n, D]` entering `query_layer` (from `input_states`; its
        answer's after its input's), and the layers below are not run.
        """
        if not token_ids or any(len(ids) == 0 for ids in token_ids):
            raise ValueError("every input needs at least one token")
        heads: TaskHeads = self.heads[task]
        lengths = torch.tensor([len(ids) for ids in token_ids], device=self.model.device)
        losses: list[torch.Tensor] | None = [] if training else None
        if lower_states is None:
            x = self.model.embed(pad_rows(token_ids, self.model.device)[0])
            if self.query_layer:
                x = self.model.layer_states(x, lengths, stop=self.query_layer, cache=cache, indexer_losses=losses)
        else:
            x = pad_states([states[: len(ids)] for states, ids in zip(lower_states, token_ids, strict=True)])
        x, total, field_positions = self.with_queries(heads, x, lengths)
        # Without a cache or training, the heads read the field tokens' final states and nothing else.
        read = field_positions if cache is None and losses is None and answers is None else None
        hidden = self.model.layer_states(
            x, total, start=self.query_layer, cache=cache, indexer_losses=losses, read=read
        )
        if cache is not None:
            cache.advance(total)
        rows = torch.arange(len(token_ids), device=hidden.device).unsqueeze(1)
        logits = heads(hidden if read is not None else hidden[rows, field_positions])
        indexer_loss = torch.stack(losses).mean() if losses else None
        if answers is None:
            input_states = hidden[:, : int(lengths.max())] if cache is not None else None
            return DecisionOutputs(logits, indexer_loss, input_states=input_states)
        answer_loss = self.answer_loss(token_ids, answers, answer_frozen_layers, lower_states)
        return DecisionOutputs(logits, indexer_loss, answer_loss)

    def answer_loss(
        self,
        token_ids: Sequence[Sequence[int]],
        answers: Sequence[Sequence[int]],
        frozen_layers: int = 0,
        lower_states: Sequence[torch.Tensor] | None = None,
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
        padded = pad_rows(rows, device)[0]
        if lower_states is None:
            x, start = self.model.embed(padded), 0
        else:
            x, start = pad_states(lower_states), self.query_layer
        hidden = self.model.layer_states(x, lengths, start=start, indexer_losses=[], frozen_layers=frozen_layers)
        row_index = torch.cat([torch.full((len(a),), r) for r, a in enumerate(answers)]).to(device)
        target_pos = torch.cat([torch.arange(len(t), len(t) + len(a)) for t, a in zip(token_ids, answers, strict=True)])
        target_pos = target_pos.to(device)
        logits = self.model.lm_head(hidden[row_index, target_pos - 1])
        return F.cross_entropy(logits.float(), padded[row_index, target_pos])

    @torch.no_grad()
    def input_states(self, rows: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Each row's states `[len, D]` entering `query_layer`, as the served pass computes them."""
        lengths = torch.tensor([len(r) for r in rows], device=self.model.device)
        x = self.model.embed(pad_rows(rows, self.model.device)[0])
        x = self.model.layer_states(x, lengths, stop=self.query_layer)
        return [x[r, :n] for r, n in enumerate(lengths.tolist())]

    def with_queries(
        self, heads: TaskHeads, x: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """States `[B, W + F, D]` with each row's field queries right after its `lengths` input
        states (padding after them), total lengths `[B]`, and the field tokens' positions `[B, F]`."""
        n_fields = heads.queries.shape[0]
        width = int(lengths.max()) + n_fields
        x = F.pad(x[:, : int(lengths.max())], (0, 0, 0, width - int(lengths.max())))
        field_positions = lengths.unsqueeze(1) + torch.arange(n_fields, device=x.device)
        rows = torch.arange(len(lengths), device=x.device).unsqueeze(1).expand_as(field_positions)
        queries = heads.queries.to(x.dtype).expand(len(lengths), -1, -1)
        return x.index_put((rows, field_positions), queries), lengths + n_fields, field_positions
