"""The load-aware verify-length scheduler (DSpark Algorithm 1) and its profile."""

import pytest
import torch

from jev.generate.drafters.autoregressive import AutoregressiveDrafter
from jev.generate.loop import generate
from jev.generate.scheduler import FixedLength, LoadAwareScheduler, VerifyProfile
from tests.tiny import random_model, tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")


def flat_then_linear(knee: int) -> VerifyProfile:
    """Pass time constant up to `knee` tokens, then proportional to tokens (compute-bound)."""
    return VerifyProfile((1, knee, 4 * knee), (1.0, 1.0, 0.25))


def test_profile_interpolates_pass_time() -> None:
    profile = flat_then_linear(10)
    assert profile.sps(1) == profile.sps(10) == 1.0
    assert profile.sps(25) == pytest.approx(1 / 2.5)
    assert profile.sps(80) == pytest.approx(1 / 8)


def test_free_verification_admits_every_draft() -> None:
    scheduler = LoadAwareScheduler(flat_then_linear(1000))
    survival = torch.tensor([[0.9, 0.5, 0.1], [0.8, 0.7, 0.6]], dtype=torch.float64)
    assert scheduler.verify_lengths(survival, torch.tensor([True, True])).tolist() == [3, 3]
    assert scheduler.draft_depth(2, 3) == 3


def test_compute_bound_verification_admits_nothing_and_skips_drafting() -> None:
    scheduler = LoadAwareScheduler(VerifyProfile((1, 2), (1.0, 0.5)))
    assert scheduler.draft_depth(4, 5) == 0
    survival = torch.full((4, 5), 0.99, dtype=torch.float64)
    assert scheduler.verify_lengths(survival, torch.ones(4, dtype=torch.bool)).tolist() == [0, 0, 0, 0]


def test_greedy_admission_by_survival_with_early_break() -> None:
    """R = 2, knee at 3 tokens: one admission is free, the next costs 4/3 in pass time.

    Candidates by survival: (0, 1) a=0.9, (1, 1) a=0.5, (0, 2) a=0.45. Admit 0.9 (B=3, Θ 2.9 > 2);
    then 0.5 would give (3.4) * 3/4 = 2.55 < 2.9: stop, even though later candidates exist.
    """
    scheduler = LoadAwareScheduler(VerifyProfile((1, 3, 4), (1.0, 1.0, 0.75)))
    survival = torch.tensor([[0.9, 0.45], [0.5, 0.1]], dtype=torch.float64)
    assert scheduler.verify_lengths(survival, torch.tensor([True, True])).tolist() == [1, 0]


def test_draft_depth_bounds_every_verify_length() -> None:
    torch.manual_seed(0)
    for knee in (2, 5, 9, 20):
        scheduler = LoadAwareScheduler(flat_then_linear(knee))
        survival = torch.rand(6, 5, dtype=torch.float64).sort(1, descending=True).values.cumprod(1)
        lengths = scheduler.verify_lengths(survival, torch.ones(6, dtype=torch.bool))
        assert int(lengths.max()) <= scheduler.draft_depth(6, 5)


def test_inactive_rows_verify_nothing() -> None:
    scheduler = LoadAwareScheduler(flat_then_linear(1000))
    survival = torch.full((3, 2), 0.9, dtype=torch.float64)
    assert scheduler.verify_lengths(survival, torch.tensor([True, False, True])).tolist() == [2, 0, 2]
    assert FixedLength().verify_lengths(survival, torch.tensor([True, False, True])).tolist() == [2, 0, 2]


class CountingDrafter(AutoregressiveDrafter):
    def propose(self, *args, **kwargs):
        raise AssertionError("the drafter must not run when nothing is worth verifying")


def test_no_draft_round_costs_a_plain_step() -> None:
    target = random_model(tiny_config(), seed=0)
    drafter = CountingDrafter(random_model(tiny_config(num_hidden_layers=1), seed=1))
    prompts = [[1, 2, 3], [4, 5]]
    scheduler = LoadAwareScheduler(VerifyProfile((1, 2), (1.0, 0.1)))
    plain = generate(target, prompts, 6, seed=3)
    spec = generate(target, prompts, 6, seed=3, drafter=drafter, draft_len=4, policy=scheduler)
    assert spec.tokens == plain.tokens
    assert spec.stats.target_passes == plain.stats.target_passes and spec.stats.drafted == 0


def test_profile_measures_a_real_model() -> None:
    profile = VerifyProfile.measure(random_model(tiny_config(), seed=0), totals=(1, 8), context=8, repeats=1)
    assert profile.tokens == (1, 8) and all(rate > 0 for rate in profile.steps_per_second)


def measured(survival: list[float], draft_seconds_per_token: float, drafted_ratio: float = 1.0) -> LoadAwareScheduler:
    """A scheduler on a flat profile (1 pass/s) that has measured rounds like these."""
    scheduler = LoadAwareScheduler(flat_then_linear(1000))
    scheduler.expected_survival = torch.tensor(survival, dtype=torch.float64)
    scheduler.draft_seconds_per_token = draft_seconds_per_token
    scheduler.round_ratio["drafted"] = drafted_ratio
    return scheduler


def test_measured_drafting_cost_and_low_survival_turn_drafting_off() -> None:
    assert LoadAwareScheduler(flat_then_linear(1000)).draft_depth(2, 3) == 3, "nothing measured: optimistic"
    assert measured([0.99, 0.98, 0.97], 0.0).draft_depth(2, 3) == 3
    assert measured([0.2, 0.04, 0.01], 0.5).draft_depth(2, 3) == 0, "2.5 tokens per 2.5 s < 2 tokens per s"
    assert measured([0.2, 0.04, 0.01], 0.01).draft_depth(2, 3) == 3


def test_round_overhead_is_measured_per_kind_of_round() -> None:
    """A drafted round that really takes far longer than its bare target pass stops paying."""
    assert measured([0.5, 0.25], 0.0).draft_depth(1, 2) == 2
    scheduler = measured([0.5, 0.25], 0.0, drafted_ratio=5.0)
    assert scheduler.draft_depth(1, 2) == 0
    scheduler.verify_lengths(torch.tensor([[0.6, 0.3]], dtype=torch.float64), torch.tensor([True]))
    assert scheduler.expected_survival.tolist() == [0.6, 0.3] and scheduler.draft_seconds_per_token == 0.0


def test_a_real_round_is_timed() -> None:
    scheduler = LoadAwareScheduler(flat_then_linear(1000))
    assert scheduler.draft_depth(1, 2) == 2
    scheduler.verify_lengths(torch.tensor([[0.9, 0.8]], dtype=torch.float64), torch.tensor([True]))
    assert scheduler.draft_seconds_per_token > 0
    scheduler.record(torch.tensor([2]), torch.tensor([1]))
    assert scheduler.round_ratio["drafted"] < 1.0, "a microsecond round against a 1 s profile"
    assert scheduler.draft_depth(1, 2) == 2 and scheduler.round_ratio["plain"] == 1.0


def test_observed_acceptance_overrides_the_drafters_optimism() -> None:
    """The drafter claims 0.9 survival; the accept rule accepted nothing in 8 rounds: stop drafting."""
    scheduler = measured([0.9, 0.8], 0.1)
    assert scheduler.draft_depth(1, 2) == 2
    for _ in range(LoadAwareScheduler.MIN_OUTCOMES):
        scheduler.record(torch.tensor([2, 0]), torch.tensor([0, 0]))
    assert scheduler.verified_at.tolist() == [8.0, 8.0] and scheduler.accepted_at.tolist() == [0.0, 0.0]
    fresh = measured([0.9, 0.8], 0.1)
    fresh.verified_at, fresh.accepted_at = scheduler.verified_at, scheduler.accepted_at
    assert fresh.draft_depth(1, 2) == 0
