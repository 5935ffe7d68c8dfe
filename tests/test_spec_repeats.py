"""The repetition guard: the banned tokens, plain decoding against an explicit loop, and speculative
decoding under the guard equal to plain decoding under it."""

import itertools

import pytest
import torch

from jev.generate.drafters.autoregressive import AutoregressiveDrafter
from jev.generate.loop import generate
from jev.generate.repeats import banned_tokens, repeat_mask
from tests.tiny import random_model, tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = [[(7 * i + 3 * j) % 32 for j in range(1 + (5 * i) % 11)] for i in range(8)]


def ngrams(tokens: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_banned_tokens_are_those_that_repeat_an_ngram(n: int):
    for history in itertools.product(range(3), repeat=6):
        history = list(history)
        expected = {t for t in range(3) if ngrams([*history, t], n)[-1] in ngrams(history, n)}
        assert banned_tokens(history, n) == expected, history


def test_the_mask_follows_each_block_position():
    generated = torch.tensor([[1, 2, 1, 0], [4, 4, 0, 0]])
    drafted = torch.tensor([[2, 3], [4, 5]])
    mask = repeat_mask(generated, torch.tensor([3, 2]), drafted, 2, 8)
    assert [set(mask[0, j].nonzero().flatten().tolist()) for j in range(3)] == [{2}, {1}, set()]
    assert [set(mask[1, j].nonzero().flatten().tolist()) for j in range(3)] == [{4}, {4}, set()]


@pytest.fixture(scope="module")
def target():
    return random_model(tiny_config(vocab_size=32), seed=0).double()


def guarded_greedy(model, prompt: list[int], new: int, n: int) -> list[int]:
    """The reference: a full forward pass over the whole text for every token, banned tokens masked."""
    out: list[int] = []
    for _ in range(new):
        logits = model(torch.tensor([prompt + out]))[0, -1]
        for token in banned_tokens(out, n):
            logits[token] = float("-inf")
        out.append(int(logits.argmax()))
    return out


@pytest.mark.parametrize("n", [1, 2, 3])
def test_plain_greedy_under_the_guard_equals_an_explicit_loop(target, n: int):
    new = 12 if n > 1 else 10
    plain = generate(target, PROMPTS, new, temperature=0.0, no_repeat_ngram=n)
    for prompt, tokens in zip(PROMPTS, plain.tokens, strict=True):
        assert tokens == guarded_greedy(target, prompt, new, n)
        assert len(set(ngrams(tokens, n))) == len(ngrams(tokens, n)), "no n-gram twice"


def test_the_guard_changes_what_an_unguarded_model_writes(target):
    unguarded = generate(target, PROMPTS, 16, temperature=0.0).tokens
    assert any(len(set(ngrams(t, 2))) < len(ngrams(t, 2)) for t in unguarded), "the tiny model loops without it"
    assert generate(target, PROMPTS, 16, temperature=0.0, no_repeat_ngram=2).tokens != unguarded


@pytest.mark.parametrize("draft_len", [1, 4])
def test_speculative_under_the_guard_equals_plain_under_it(target, draft_len: int):
    plain = generate(target, PROMPTS, 16, temperature=0.0, no_repeat_ngram=2)
    same = random_model(tiny_config(vocab_size=32), seed=0).double()
    other = random_model(tiny_config(vocab_size=32, num_hidden_layers=1), seed=1).double()
    for drafter in (AutoregressiveDrafter(same), AutoregressiveDrafter(other)):
        spec = generate(target, PROMPTS, 16, temperature=0.0, drafter=drafter, draft_len=draft_len,
                        no_repeat_ngram=2)
        assert spec.tokens == plain.tokens
        assert spec.stats.verified > 0


def test_a_negative_guard_is_refused(target):
    with pytest.raises(ValueError, match="no_repeat_ngram"):
        generate(target, PROMPTS, 4, no_repeat_ngram=-1)
