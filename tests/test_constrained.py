"""Jev's constrained decoding against a slow reference: full forward passes, no cache, no trie."""

from typing import Literal

import numpy as np
import pytest
import torch
from pydantic import BaseModel, Field

from jev.generate.answer import AnswerTokens
from jev.generate.constrained import ValueTrie, write_answers
from jev.model import Model
from jev.tokenizer import EOS_ID
from tests.tiny import random_model, tiny_config, tiny_tokenizer


class Verdict(BaseModel):
    route: Literal["tuesday", "turkish", "meeting", "kernel", "cruise"]
    urgent: bool
    score: int = Field(ge=1, le=12)


@pytest.fixture(scope="module")
def setup() -> tuple[Model, AnswerTokens, list[list[int]]]:
    from jev.schema import compile_decision

    tokenizer = tiny_tokenizer()
    model = random_model(tiny_config(index_topk=6, vocab_size=400, max_position_embeddings=256), seed=2)
    answer = AnswerTokens(compile_decision(Verdict), tokenizer, EOS_ID)
    texts = ["Win a free cruise now!", "Meeting moved to Tuesday, see agenda.", "Re: patch for the kernel build " * 4]
    bos = tokenizer.token_to_id("<bos>")
    return model, answer, [[bos, *tokenizer.encode(t).ids] for t in texts]


def _logprobs(model: Model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids]))[0].double(), dim=-1)


def _reference(
    model: Model, answer: AnswerTokens, ids: list[int]
) -> tuple[list[int], list[np.ndarray], list[np.ndarray]]:
    """Greedy, token by token, each step a full forward pass over everything written so far."""
    prefix = [*ids, *answer.syntax[0]]
    chosen, first_probs, exact_probs = [], [], []
    fields = answer.spec.closed_fields
    for i, spec in enumerate(fields):
        sequences = [[*v, answer.syntax[i + 1][0]] for v in answer.choices(spec)]
        scores = []
        for seq in sequences:
            logp = _logprobs(model, prefix + seq)
            scores.append(sum(float(logp[len(prefix) - 1 + t, tok]) for t, tok in enumerate(seq)))
        exact_probs.append(np.exp(np.array(scores) - np.logaddexp.reduce(scores)))
        alive, written, first = list(range(len(sequences))), [], None
        while len(alive) > 1:
            options = sorted({sequences[v][len(written)] for v in alive})
            if len(options) > 1:
                logp = _logprobs(model, prefix + written)[-1, options]
                probs = torch.softmax(logp, dim=0).numpy()
                if first is None:
                    first = np.zeros(len(sequences))
                    for token, p in zip(options, probs, strict=True):
                        sharing = [v for v in alive if sequences[v][len(written)] == token]
                        first[sharing] = p / len(sharing)
                token = options[int(probs.argmax())]
            else:
                token = options[0]
            written.append(token)
            alive = [v for v in alive if sequences[v][len(written) - 1] == token]
        value = alive[0]
        chosen.append(value)
        first_probs.append(first if first is not None else np.eye(len(sequences))[value])
        prefix += answer.choices(spec)[value] + answer.syntax[i + 1]
    return chosen, first_probs, exact_probs


def test_trie_forces_shared_tokens_and_refuses_prefixes() -> None:
    trie = ValueTrie([[1, 2, 3], [1, 2, 4], [1, 5]])
    node, tokens = trie.forced(0)
    assert tokens == [1] and sorted(trie.children[node]) == [2, 5]
    with pytest.raises(ValueError, match="prefix"):
        ValueTrie([[1, 2], [1, 2, 3]])


def test_greedy_values_and_both_probabilities_match_the_slow_reference(setup) -> None:
    model, answer, inputs = setup
    written = write_answers(model, answer, inputs, exact=True)
    fields = answer.spec.closed_fields
    for row, ids in enumerate(inputs):
        chosen, first, exact = _reference(model, answer, ids)
        for spec, value, first_p, exact_p in zip(fields, chosen, first, exact, strict=True):
            assert written.values[spec.name][row] == value
            np.testing.assert_allclose(written.first_token[spec.name][row], first_p, atol=1e-5)
            np.testing.assert_allclose(written.exact[spec.name][row], exact_p, atol=1e-5)
            assert written.first_token[spec.name][row].sum() == pytest.approx(1.0)


@pytest.mark.slow
def test_passes_are_spent_only_on_choices(setup) -> None:
    model, answer, inputs = setup
    alone = [write_answers(model, answer, [ids]) for ids in inputs]
    batch = write_answers(model, answer, inputs)
    assert batch.forward_passes == max(a.forward_passes for a in alone)
    assert batch.answer_tokens == [a.answer_tokens[0] for a in alone]
    fields = answer.spec.closed_fields
    for row, single in enumerate(alone):
        values = {f.name: f.values[int(batch.values[f.name][row])] for f in fields}
        written = len(answer.encode(values)) - len(answer.syntax[-1]) - 1
        assert single.answer_tokens[0] == written
        assert single.forward_passes < written
