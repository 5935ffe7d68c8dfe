"""Jev's own constrained decoding of a decision's closed fields: the generative answer at its fastest.

The language model writes the answer (`jev.generate.answer`) after the input, greedily, restricted at
each step to the tokens that some allowed value continues with. Each field's values form a trie of
token sequences (a value's tokens plus the first syntax token after it, so no value is a prefix of
another). JSON syntax and every token the trie forces are fed without a decision, together with
the next token that needs one, so a sequential pass is spent only where the model has a choice;
the first pass reads the input and the opening syntax (the prefill).

Two kinds of probabilities come out, as a user of generation could get them:

- first-token: at the first node of a field's trie where values part, the model's probabilities
  of the allowed tokens, renormalised; values that share that token share its mass equally;
- exact: every value's whole token sequence scored after the same prefix (one batched pass per
  field over copies of the cache), renormalised over the values.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from jev.generate.answer import AnswerTokens
from jev.model import LatentCache, Model
from jev.ragged import pad_rows


class ValueTrie:
    """The token sequences of one field's values as a trie; node 0 is the root."""

    def __init__(self, sequences: Sequence[Sequence[int]]) -> None:
        self.sequences = [list(s) for s in sequences]
        self.children: list[dict[int, int]] = [{}]
        self.values: list[list[int]] = [[]]
        self.depth = [0]
        for value, sequence in enumerate(self.sequences):
            node = 0
            self.values[0].append(value)
            for token in sequence:
                if token not in self.children[node]:
                    self.children[node][token] = len(self.children)
                    self.children.append({})
                    self.values.append([])
                    self.depth.append(self.depth[node] + 1)
                node = self.children[node][token]
                self.values[node].append(value)
        for value, sequence in enumerate(self.sequences):
            if len(self.values[self._end(sequence)]) > 1:
                raise ValueError(f"value {value}'s tokens {sequence} are a prefix of another value's")

    def _end(self, sequence: list[int]) -> int:
        node = 0
        for token in sequence:
            node = self.children[node][token]
        return node

    def forced(self, node: int) -> tuple[int, list[int]]:
        """Follow single-child links while more than one value remains: the node reached, tokens passed."""
        tokens = []
        while len(self.children[node]) == 1 and len(self.values[node]) > 1:
            token, node = next(iter(self.children[node].items()))
            tokens.append(token)
        return node, tokens


@dataclass
class WrittenAnswers:
    """Greedy constrained answers for a batch.

    values: per field, the index of each row's written value `[B]`. first_token / exact: per field,
    `[B, n_values]` probabilities (exact only when asked). forward_passes: sequential passes of the
    batch, prefill included. answer_tokens: per row, the answer's tokens up to its last value.
    """

    values: dict[str, np.ndarray]
    first_token: dict[str, np.ndarray]
    exact: dict[str, np.ndarray] | None
    forward_passes: int
    answer_tokens: list[int]


@torch.inference_mode()
def write_answers(
    model: Model, answer: AnswerTokens, token_ids: Sequence[Sequence[int]], exact: bool = False
) -> WrittenAnswers:
    """Write every closed field of each input's answer, greedily under the values' constraint."""
    fields = answer.spec.closed_fields
    if any(f.kind == "multilabel" for f in fields):
        raise ValueError("constrained decoding here covers single-choice fields; a multi-label field has 2^n values")
    batch = len(token_ids)
    cache = model.new_cache(batch, max(len(ids) for ids in token_ids) + answer.max_tokens + 1)
    pending = [[*ids, *answer.syntax[0]] for ids in token_ids]
    written = WrittenAnswers({}, {}, {} if exact else None, 0, [len(answer.syntax[0])] * batch)
    for i, spec in enumerate(fields):
        after = answer.syntax[i + 1]
        choices = answer.choices(spec)
        trie = ValueTrie([[*ids, after[0]] for ids in choices])
        if written.exact is not None:
            written.exact[spec.name] = _exact(model, cache, pending, trie.sequences)
        chosen = np.full(batch, -1)
        first = np.zeros((batch, spec.n_values))
        node = [0] * batch
        for row in range(batch):
            node[row], tokens = trie.forced(0)
            pending[row] += tokens
        while (chosen < 0).any():
            for row in range(batch):
                if chosen[row] < 0 and len(trie.values[node[row]]) == 1:
                    value = trie.values[node[row]][0]
                    chosen[row] = value
                    pending[row] += trie.sequences[value][trie.depth[node[row]] :] + after[1:]
                    if not first[row].any():
                        first[row, value] = 1.0
            if not (chosen < 0).any():
                break
            feed = [pending[row] if chosen[row] < 0 else [] for row in range(batch)]
            logits = _last_logits(model, cache, feed)
            written.forward_passes += 1
            for row in np.flatnonzero(chosen < 0):
                pending[row] = []
                allowed = list(trie.children[node[row]])
                probs = torch.softmax(logits[row, allowed].double(), dim=0).numpy()
                if not first[row].any():
                    for token, p in zip(allowed, probs, strict=True):
                        under = trie.values[trie.children[node[row]][token]]
                        first[row, under] = p / len(under)
                token = allowed[int(probs.argmax())]
                node[row], tokens = trie.forced(trie.children[node[row]][token])
                pending[row] = [token, *tokens]
        written.values[spec.name] = chosen
        written.first_token[spec.name] = first
        syntax_after = len(after) if i < len(fields) - 1 else 0
        for row in range(batch):
            written.answer_tokens[row] += len(choices[chosen[row]]) + syntax_after
    return written


def _last_logits(model: Model, cache: LatentCache, feed: list[list[int]]) -> torch.Tensor:
    """Append each row's tokens (rows may feed none) in one pass; logits `[B, V]` after each row's last."""
    tokens, lengths = pad_rows(feed)
    hidden = model.hidden_states(tokens.to(model.device), cache=cache, lengths=lengths.to(model.device))
    last = (lengths - 1).clamp(min=0).to(hidden.device)
    return model.lm_head(hidden[torch.arange(len(feed), device=hidden.device), last]).float().cpu()


def _exact(model: Model, cache: LatentCache, pending: list[list[int]], sequences: list[list[int]]) -> np.ndarray:
    """`[B, n_values]`: each value's sequence probability after each row's prefix, renormalised."""
    batch, n_values = len(pending), len(sequences)
    copies = cache.select(torch.arange(batch).repeat_interleave(n_values))
    feed = [[*pending[row], *sequences[v]] for row in range(batch) for v in range(n_values)]
    tokens, lengths = pad_rows(feed)
    hidden = model.hidden_states(tokens.to(model.device), cache=copies, lengths=lengths.to(model.device))
    scores = torch.zeros(len(feed), dtype=torch.float64)
    for row, ids in enumerate(feed):
        start = len(pending[row // n_values])
        positions = torch.arange(start - 1, len(ids) - 1, device=hidden.device)
        logp = torch.log_softmax(model.lm_head(hidden[row, positions]).double(), dim=-1)
        scores[row] = logp[torch.arange(len(positions)), torch.tensor(ids[start:], device=hidden.device)].sum().cpu()
    return torch.softmax(scores.view(batch, n_values), dim=1).numpy()
