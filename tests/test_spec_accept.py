"""The sampling filter and the accept rule as pure functions: small exact cases."""

import pytest
import torch

from jev.generate.accept import (
    SamplingSettings,
    accept_block,
    accept_ratio,
    greedy_verdict,
    outcome_distribution,
    recovery_distribution,
    sample_from,
    warp,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def settings(batch: int = 1, **kwargs) -> SamplingSettings:
    return SamplingSettings.build(batch, **kwargs)


def test_warp_temperature_topk_topp_in_vllm_order() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]], dtype=torch.float64)
    assert torch.allclose(warp(logits, settings()), logits.softmax(-1))
    assert torch.allclose(warp(logits, settings(temperature=0.5)), (logits / 0.5).softmax(-1))
    top2 = warp(logits, settings(top_k=2))
    assert torch.allclose(top2[0, :2], logits[0, :2].softmax(-1)) and top2[0, 2:].eq(0).all()
    full = logits.softmax(-1)[0]
    # Nucleus: the smallest prefix whose mass reaches top_p, computed on the tempered distribution.
    nucleus = warp(logits, settings(top_p=float(full[0] + 1e-9)))
    assert nucleus[0, :2].gt(0).all() and nucleus[0, 2:].eq(0).all()
    exact = warp(logits, settings(top_p=float(full[0])))
    assert exact[0, 0] == 1


def test_warp_greedy_rows_are_one_hot_and_rows_are_independent() -> None:
    logits = torch.randn(3, 4, 11, dtype=torch.float64)
    probs = warp(logits, settings(3, temperature=[0.0, 1.0, 0.7], top_k=[0, 3, 0], top_p=[1.0, 1.0, 0.6]))
    assert torch.equal(probs[0], torch.nn.functional.one_hot(logits[0].argmax(-1), 11).double())
    assert torch.allclose(probs[1], warp(logits[1:2], settings(top_k=3))[0])
    assert torch.allclose(probs[2], warp(logits[2:3], settings(temperature=0.7, top_p=0.6))[0])
    assert torch.allclose(probs.sum(-1), torch.ones(3, 4, dtype=torch.float64))


def test_warp_without_filters_skips_the_sort_and_agrees_with_the_filtering_path(monkeypatch) -> None:
    logits = torch.randn(3, 2, 50, dtype=torch.float64)
    sorting = torch.Tensor.sort
    calls = []
    monkeypatch.setattr(torch.Tensor, "sort", lambda self, *a, **k: calls.append(1) or sorting(self, *a, **k))
    alone = warp(logits, settings(3, temperature=[0.0, 1.0, 0.7]))
    assert not calls, "no row filters, so nothing is sorted"
    mixed = warp(logits, settings(3, temperature=[0.0, 1.0, 0.7], top_p=[1.0, 1.0, 0.999999]))
    assert calls, "a top-p row takes the filtering path"
    assert torch.allclose(alone[:2], mixed[:2], rtol=0, atol=1e-15)
    assert torch.allclose(alone[2], (logits[2] / 0.7).softmax(-1), rtol=0, atol=1e-15)


def test_settings_refuse_bad_values() -> None:
    with pytest.raises(ValueError, match="temperature"):
        settings(temperature=-1.0)
    with pytest.raises(ValueError, match="top_p"):
        settings(top_p=0.0)
    with pytest.raises(ValueError, match="one value per sequence"):
        settings(2, top_k=[1, 2, 3])


def test_sample_from_is_the_inverse_cdf_and_skips_zero_mass() -> None:
    probs = torch.tensor([0.25, 0.0, 0.5, 0.25, 0.0], dtype=torch.float64).expand(5, -1)
    uniforms = torch.tensor([0.0, 0.2499, 0.25, 0.75, 0.999999999])
    assert sample_from(probs, uniforms).tolist() == [0, 0, 2, 3, 3]
    short = torch.tensor([[0.3, 0.6999999, 0.0]], dtype=torch.float64)
    assert sample_from(short, torch.tensor([0.99999999])).tolist() == [1]


def test_accept_ratio_and_recovery() -> None:
    p = torch.tensor([0.7, 0.3], dtype=torch.float64)
    q = torch.tensor([0.5, 0.5], dtype=torch.float64)
    assert accept_ratio(p, q).tolist() == pytest.approx([1.0, 0.6])
    assert recovery_distribution(p, q).tolist() == pytest.approx([1.0, 0.0])
    assert torch.equal(recovery_distribution(p, p), p)


def test_outcome_distribution_by_hand() -> None:
    """p = (0.7, 0.3) everywhere, q = (0.5, 0.5), draft x_1 = 1: accept with 0.6, else emit token 0."""
    p = torch.tensor([0.7, 0.3], dtype=torch.float64).expand(1, 2, 2)
    q = torch.tensor([0.5, 0.5], dtype=torch.float64).expand(1, 1, 2)
    law = outcome_distribution(p, q, torch.tensor([[1]]), torch.tensor([1]))
    expected = torch.tensor([[[0.4, 0.0], [0.6 * 0.7, 0.6 * 0.3]]], dtype=torch.float64)
    assert torch.allclose(law, expected)
    unverified = outcome_distribution(p, q, torch.tensor([[1]]), torch.tensor([0]))
    assert torch.allclose(unverified, torch.tensor([[[0.7, 0.3], [0.0, 0.0]]], dtype=torch.float64))


def test_outcome_distribution_sums_to_one_and_never_writes_its_inputs() -> None:
    torch.manual_seed(0)
    p = torch.randn(6, 5, 9, dtype=torch.float64).softmax(-1)
    q = torch.randn(6, 4, 9, dtype=torch.float64).softmax(-1)
    drafted = torch.randint(0, 9, (6, 4))
    n = torch.tensor([0, 1, 2, 3, 4, 4])
    p_before, q_before = p.clone(), q.clone()
    law = outcome_distribution(p, q, drafted, n)
    assert torch.allclose(law.sum((1, 2)), torch.ones(6, dtype=torch.float64), atol=1e-14)
    positions = torch.arange(5).view(1, -1)
    assert law.sum(-1)[positions > n.view(-1, 1)].eq(0).all()
    accept_block(p, q, drafted, n, torch.rand(6, dtype=torch.float64))
    assert torch.equal(p, p_before) and torch.equal(q, q_before)


def test_accept_block_draws_the_outcome_law() -> None:
    """With a fine grid of uniforms, the inverse-CDF draws reproduce the law to grid precision."""
    torch.manual_seed(1)
    p = torch.randn(1, 4, 5, dtype=torch.float64).softmax(-1)
    q = torch.randn(1, 3, 5, dtype=torch.float64).softmax(-1)
    drafted, n = torch.tensor([[1, 3, 0]]), torch.tensor([3])
    grid = 100_000
    uniforms = (torch.arange(grid, dtype=torch.float64) + 0.5) / grid
    verdict = accept_block(
        p.expand(grid, -1, -1), q.expand(grid, -1, -1), drafted.expand(grid, -1), n.expand(grid), uniforms
    )
    counts = torch.zeros(4, 5, dtype=torch.float64)
    counts.index_put_((verdict.n_accepted, verdict.next_token), torch.ones(grid, dtype=torch.float64), accumulate=True)
    assert torch.allclose(counts / grid, outcome_distribution(p, q, drafted, n)[0], atol=2 / grid)
    assert torch.equal(verdict.bonus, verdict.n_accepted == 3)


def test_accept_block_is_the_inverse_cdf_of_the_whole_outcome_law() -> None:
    """The same uniform gives the same outcome as inverse-CDF sampling of the flattened law."""
    torch.manual_seed(2)
    p = torch.randn(400, 5, 11, dtype=torch.float64).softmax(-1)
    q = torch.randn(400, 4, 11, dtype=torch.float64).softmax(-1)
    drafted = torch.randint(0, 11, (400, 4))
    n = torch.randint(0, 5, (400,))
    uniforms = torch.rand(400, dtype=torch.float64)
    verdict = accept_block(p, q, drafted, n, uniforms)
    flat = sample_from(outcome_distribution(p, q, drafted, n).flatten(1), uniforms)
    assert torch.equal(verdict.n_accepted, flat // 11) and torch.equal(verdict.next_token, flat % 11)


def test_greedy_verdict_is_the_rules_outcome_on_greedy_rows() -> None:
    """Read off the argmaxes, it equals `accept_block` on warp's one-hot p for any q and uniform."""
    generator = torch.Generator().manual_seed(0)
    batch, k, vocab = 300, 4, 9
    logits = torch.randn(batch, k + 1, vocab, dtype=torch.float64, generator=generator)
    argmax = logits.argmax(-1)
    # Each row's drafts hold up to a random point and miss there (and may hold again after it).
    held = torch.randint(0, k + 1, (batch, 1), generator=generator) > torch.arange(k)
    wrong = (argmax[:, :k] + torch.randint(1, vocab, (batch, k), generator=generator)) % vocab
    drafted = torch.where(held | (torch.rand(batch, k, generator=generator) < 0.3), argmax[:, :k], wrong)
    n_verified = torch.randint(0, k + 1, (batch,), generator=generator)
    q = torch.rand(batch, k, vocab, dtype=torch.float64, generator=generator).softmax(-1)
    got = greedy_verdict(logits, drafted, n_verified)
    p = warp(logits, settings(batch, temperature=0.0))
    for u in (0.0, 0.37, 0.999):
        want = accept_block(p, q, drafted, n_verified, torch.full((batch,), u, dtype=torch.float64))
        assert torch.equal(got.n_accepted, want.n_accepted)
        assert torch.equal(got.next_token, want.next_token)
        assert torch.equal(got.bonus, want.bonus)
    assert 0 < int(got.bonus.sum()) < batch and int(got.n_accepted.max()) == k


def test_greedy_accepts_iff_argmax_whatever_q() -> None:
    logits = torch.randn(2, 3, 7, dtype=torch.float64)
    p = warp(logits, settings(2, temperature=0.0))
    argmax = logits.argmax(-1)
    q = torch.randn(2, 2, 7, dtype=torch.float64).softmax(-1)
    drafted = torch.stack((argmax[0, :2], torch.stack((argmax[1, 0], (argmax[1, 1] + 1) % 7))))
    for u in (0.0, 0.5, 0.999):
        verdict = accept_block(p, q, drafted, torch.tensor([2, 2]), torch.full((2,), u, dtype=torch.float64))
        assert verdict.n_accepted.tolist() == [2, 1]
        assert verdict.next_token.tolist() == [int(argmax[0, 2]), int(argmax[1, 1])]
