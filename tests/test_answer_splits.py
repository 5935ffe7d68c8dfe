"""Value splits: where a written answer's closed values part ways, and the answer loss that teaches
those tokens the heads' distribution. Both are checked against an enumeration of whole answers."""

from typing import Annotated, Literal

import pytest
import torch
import torch.nn.functional as F
from pydantic import BaseModel, Field

from jev.engine.answer import AnswerTokens
from jev.engine.decision import DecisionModel
from jev.schema import MaxTokens, compile_decision
from tests.conftest import random_model, tiny_config, tiny_tokenizer


class Ruling(BaseModel):
    route: Literal["tuesday", "turkish", "meeting", "kernel", "cruise"]
    urgent: bool
    score: int = Field(ge=1, le=12)  # "1" is a prefix of "10", "11" and "12"
    note: Annotated[str, MaxTokens(8)]


SPEC = compile_decision(Ruling)
ROWS = [
    {"route": "turkish", "urgent": True, "score": 1, "note": "see agenda"},
    {"route": "cruise", "urgent": False, "score": 11, "note": ""},
]


@pytest.fixture(scope="module")
def answer() -> AnswerTokens:
    return AnswerTokens(SPEC, tiny_tokenizer())


def _alternatives(answer: AnswerTokens, values: dict, field: int) -> list[list[int]]:
    """The whole answer with each value of closed field `field` in turn, in the head's order."""
    spec = SPEC.closed_fields[field]
    return [answer.encode({**values, spec.name: value}) for value in spec.values]


def _branches(written: list[int], alternatives: list[list[int]], position: int) -> dict[int, list[int]]:
    """Next token at `position` -> the values whose whole answer agrees with `written` before it."""
    branches: dict[int, list[int]] = {}
    for k, other in enumerate(alternatives):
        if other[:position] == written[:position]:
            branches.setdefault(other[position], []).append(k)
    return branches


@pytest.mark.parametrize("values", ROWS)
def test_value_splits_are_where_whole_answers_part(answer, values):
    written = answer.encode(values)
    expected = set()
    for field in range(len(SPEC.closed_fields)):
        alternatives = _alternatives(answer, values, field)
        for position in range(len(written)):
            branches = _branches(written, alternatives, position)
            if len(branches) > 1:
                expected.add((position, field, tuple((t, tuple(ks)) for t, ks in sorted(branches.items()))))
    found = {(s.position, s.field, tuple(sorted(s.branches))) for s in answer.value_splits(values)}
    assert found == expected
    assert any(len(ks) > 1 for _, _, branches in found for _, ks in branches)  # a shared prefix is covered


def test_answer_loss_teaches_value_tokens_the_heads_distribution(answer):
    """At each split the target is the heads' probability of the values still possible, summed per
    next token; elsewhere the written token. Reference: per row, per token, from whole answers."""
    torch.manual_seed(0)
    model = random_model(tiny_config(index_topk=8, vocab_size=400, max_position_embeddings=128))
    network = DecisionModel(model, {})
    token_ids = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]
    answers = [answer.encode(v) for v in ROWS]
    splits = [answer.value_splits(v) for v in ROWS]
    probs = [torch.rand(len(ROWS), f.n_values).softmax(-1) for f in SPEC.closed_fields]

    losses = []
    for row, values in enumerate(ROWS):
        ids = [*token_ids[row], *answers[row]]
        hidden, _ = model.training_states(torch.tensor([ids]), lengths=torch.tensor([len(ids)]))
        logprobs = F.log_softmax(model.lm_head(hidden[0]).double(), -1)
        for j, token in enumerate(answers[row]):
            target = {token: 1.0}
            for field in range(len(SPEC.closed_fields)):
                branches = _branches(answers[row], _alternatives(answer, values, field), j)
                if len(branches) > 1:
                    mass = {t: float(probs[field][row, ks].sum()) for t, ks in branches.items()}
                    target = {t: m / sum(mass.values()) for t, m in mass.items()}
            losses.append(-sum(q * logprobs[len(token_ids[row]) + j - 1, t] for t, q in target.items()))
    reference = torch.stack(losses).mean()

    soft = network.answer_loss(token_ids, answers, splits, probs)
    hard = network.answer_loss(token_ids, answers)
    assert soft.item() == pytest.approx(reference.item(), rel=1e-4)
    assert abs(soft.item() - hard.item()) > 1e-3
    one_hot = [F.one_hot(torch.tensor([f.index(v[f.name]) for v in ROWS]), f.n_values).float()
               for f in SPEC.closed_fields]
    assert network.answer_loss(token_ids, answers, splits, one_hot).item() == pytest.approx(hard.item(), rel=1e-5)
