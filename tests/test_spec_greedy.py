"""Greedy speculative decoding is token-identical to plain greedy decoding, and rollback is exact."""

import pytest
import torch

from jev.generate.drafters.autoregressive import AutoregressiveDrafter
from jev.generate.loop import generate
from jev.generate.scheduler import LoadAwareScheduler, VerifyProfile
from jev.model import Model
from tests.tiny import random_model, tiny_config

PROMPTS = [[(7 * i + 3 * j) % 97 for j in range(1 + (5 * i) % 11)] for i in range(24)]
NEW = 20


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target() -> Model:
    return random_model(tiny_config(), seed=0).double()


def drafters(target: Model) -> dict[str, AutoregressiveDrafter]:
    """A different random model (mostly rejected) and the target itself (always accepted)."""
    other = random_model(tiny_config(num_hidden_layers=1), seed=1).double()
    return {
        "other": AutoregressiveDrafter(other),
        "self": AutoregressiveDrafter(random_model(tiny_config(), seed=0).double()),
    }


def cached_prefixes(cache, lengths: list[int]) -> list[torch.Tensor]:
    return [cache.latent[:, row, :n] for row, n in enumerate(lengths)]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["other", "self"])
@pytest.mark.parametrize("draft_len", [1, 3, 5])
def test_greedy_speculative_equals_plain(target: Model, kind: str, draft_len: int) -> None:
    plain = generate(target, PROMPTS, NEW, temperature=0.0)
    spec = generate(target, PROMPTS, NEW, temperature=0.0, drafter=drafters(target)[kind], draft_len=draft_len)
    assert spec.tokens == plain.tokens
    assert spec.stats.target_passes < plain.stats.target_passes if kind == "self" else True
    assert torch.equal(spec.cache.lengths, plain.cache.lengths)
    lengths = plain.cache.lengths.tolist()
    assert lengths == [len(p) + NEW - 1 for p in PROMPTS]
    for got, want in zip(cached_prefixes(spec.cache, lengths), cached_prefixes(plain.cache, lengths), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


def test_self_drafting_accepts_everything(target: Model) -> None:
    spec = generate(target, PROMPTS[:4], 12, temperature=0.0, drafter=drafters(target)["self"], draft_len=3)
    assert spec.stats.accepted == spec.stats.verified
    assert spec.stats.mean_accepted_length == 4.0


def test_drafter_cache_matches_its_own_plain_pass(target: Model) -> None:
    """After rollbacks and backlogs, the drafter's cache holds exactly its plain pass over the committed text."""
    drafter = drafters(target)["self"]
    out = generate(target, PROMPTS, 9, temperature=0.0, drafter=drafter, draft_len=3)
    reference = generate(drafter.model, [p + t for p, t in zip(PROMPTS, out.tokens, strict=True)], 1, temperature=0.0)
    for row, held in enumerate(drafter._cache.lengths.tolist()):
        n = min(held, len(PROMPTS[row]) + len(out.tokens[row]) - 1)
        torch.testing.assert_close(drafter._cache.latent[:, row, :n], reference.cache.latent[:, row, :n])


def test_the_drafter_reads_its_lm_head_for_its_drafts_alone(target: Model, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its pass over the prompts and each round's over the backlog only fill its cache: the LM head reads
    one row a sequence, once a draft (it read every prompt position before)."""
    drafter = drafters(target)["other"]
    head, rows = drafter.model.lm_head, []
    forward = head.forward
    monkeypatch.setattr(head, "forward", lambda x: (rows.append(x.shape[:-1].numel()), forward(x))[1])
    out = generate(target, PROMPTS[:4], 8, temperature=0.0, drafter=drafter, draft_len=3, shrink=False)
    assert set(rows) == {4} and len(rows) == out.stats.drafter_passes - 1


def test_mixed_batch_settings_stop_tokens_and_policies(target: Model) -> None:
    """Greedy rows stay identical to plain greedy next to sampled rows, under any verify policy."""
    temperatures = [0.0, 1.0] * 12
    profile = VerifyProfile.by_positions((1, 30, 60), (1.0, 1.0, 0.4))
    plain = generate(target, PROMPTS, NEW, temperature=0.0, stop=[5])
    for policy in (None, LoadAwareScheduler(profile)):
        spec = generate(
            target,
            PROMPTS,
            NEW,
            temperature=temperatures,
            seed=list(range(24)),
            stop=[5],
            drafter=drafters(target)["other"],
            draft_len=4,
            policy=policy,
        )
        for row in range(0, 24, 2):
            assert spec.tokens[row] == plain.tokens[row]
        for tokens in spec.tokens:
            assert 5 not in tokens[:-1] and len(tokens) <= NEW


def test_seeded_sampling_is_reproducible(target: Model) -> None:
    runs = [
        generate(
            target,
            PROMPTS[:6],
            10,
            temperature=0.9,
            top_p=0.9,
            seed=list(range(6)),
            drafter=drafters(target)["other"],
            draft_len=3,
        ).tokens
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    alone = generate(
        target, PROMPTS[2:3], 10, temperature=0.9, top_p=0.9, seed=[2], drafter=drafters(target)["other"], draft_len=3
    ).tokens
    assert isinstance(alone[0], list) and len(alone[0]) == 10


def test_greedy_speculative_equals_plain_on_the_sparse_path() -> None:
    """DSA ties (scores exactly 0 after ReLU) must break the same way for 1-token and (k+1)-token passes."""
    sparse = random_model(tiny_config(index_topk=6), seed=0).double()
    plain = generate(sparse, PROMPTS, NEW, temperature=0.0)
    spec = generate(sparse, PROMPTS, NEW, temperature=0.0, drafter=drafters(sparse)["other"], draft_len=3)
    assert spec.tokens == plain.tokens
