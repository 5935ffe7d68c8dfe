"""`benchmarks/drafter_acceptance.py`: greedy, its rounds over a written text keep exactly what
speculative decoding keeps; at T = 1 a draft's chance is the accept rule's, sum min(p, q)."""

import pytest
import torch
from test_spec_dspark import VOCAB, drafter
from test_spec_statistical import peaked_model

from benchmarks.drafter_acceptance import chances, rounds_tau
from jev.generate.loop import generate

PROMPTS = [[3, 1, 4], [1, 5, 9, 2, 6], [5, 3]]
NEW = 20


@pytest.mark.parametrize("vocab", [None, VOCAB])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_rounds_equal_speculative_decodings(k: int, vocab: list[int] | None) -> None:
    target = peaked_model(2, seed=0).double()
    spark = drafter(target, vocab=vocab)
    for prompt in PROMPTS:
        text = generate(target, [prompt], NEW, temperature=0.0).tokens[0]
        held, inside = chances(target, [spark], prompt + text, len(prompt), len(prompt) + len(text) - 1, greedy=True)
        tokens, rounds = rounds_tau(held[0], inside, k)
        served = generate(target, [prompt], NEW, temperature=0.0, drafter=spark, draft_len=k)
        assert served.tokens[0] == text
        # The served decoding's first round is the prompt's pass, which writes the first token undrafted.
        assert (tokens, rounds) == (len(text) - 1, served.stats.rounds - 1)
        assert served.stats.accepted == tokens - rounds


def test_a_drafts_chance_at_t1_is_the_overlap_of_p_and_q() -> None:
    target = peaked_model(2, seed=0).double()
    spark = drafter(target, vocab=VOCAB)
    ids = PROMPTS[1] + generate(target, [PROMPTS[1]], 8, temperature=1.0, seed=0).tokens[0]
    held, inside = chances(target, [spark], ids, 5, len(ids) - 1, greedy=False)
    with torch.no_grad():
        p = torch.softmax(target(torch.tensor([ids]))[0], dim=-1)
        for a, anchor in enumerate(range(5, len(ids) - 1)):
            hidden = target.hidden_states(torch.tensor([ids[:anchor]]))[:, -1]
            k = int(inside[a].sum())
            logits, _ = spark.head(hidden, target.embed(torch.tensor([ids[anchor : anchor + k]])), spark.vocabulary)
            q = spark.vocabulary.spread(torch.softmax(logits[0], dim=-1))
            expected = torch.minimum(p[anchor : anchor + k], q).sum(-1)
            torch.testing.assert_close(held[0][a, :k], expected.double(), rtol=1e-6, atol=1e-9)
