"""The load-aware verify-length scheduler (DSpark Algorithm 1) and its profile."""

import collections
import statistics
import time

import numpy as np
import pytest
import torch

from jev.generate.drafters.autoregressive import AutoregressiveDrafter
from jev.generate.loop import generate
from jev.generate.scheduler import FixedLength, LoadAwareScheduler, VerifyProfile
from tests.tiny import random_model, tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")


def on(n: int) -> torch.Tensor:
    """`n` active sequences."""
    return torch.ones(n, dtype=torch.bool)


def flat_then_linear(knee: int) -> VerifyProfile:
    """Pass time constant up to `knee` tokens, then proportional to tokens (compute-bound)."""
    return VerifyProfile.by_positions((1, knee, 4 * knee), (1.0, 1.0, 0.25))


def seconds(profile: VerifyProfile, rows: int, width: int) -> float:
    return float(profile.pass_seconds(rows, torch.tensor([width]))[0])


def test_profile_interpolates_pass_time() -> None:
    profile = flat_then_linear(10)
    assert seconds(profile, 1, 1) == seconds(profile, 2, 5) == 1.0
    assert seconds(profile, 5, 5) == pytest.approx(2.5)
    assert seconds(profile, 10, 8) == pytest.approx(8)


def test_a_measured_grid_interpolates_between_sequences_and_widths_and_extends_past_them() -> None:
    """Seconds of a pass by sequences (rows 1, 4) and width (1, 3): linear between, on the last
    segment's line past them."""
    profile = VerifyProfile(rows=(1, 4), widths=(1, 3), seconds=((1.0, 2.0), (4.0, 10.0)))
    assert seconds(profile, 1, 2) == pytest.approx(1.5)
    assert seconds(profile, 4, 5) == pytest.approx(16.0)
    assert seconds(profile, 2, 1) == pytest.approx(2.0)
    assert seconds(profile, 2, 3) == pytest.approx(2.0 + (10.0 - 2.0) / 3)
    assert seconds(profile, 7, 1) == pytest.approx(7.0)
    widths = torch.tensor([1, 2, 3, 5])
    assert profile.pass_seconds(3, widths).tolist() == pytest.approx([seconds(profile, 3, w) for w in (1, 2, 3, 5)])


def test_free_verification_admits_every_draft() -> None:
    scheduler = LoadAwareScheduler(flat_then_linear(1000))
    survival = torch.tensor([[0.9, 0.5, 0.1], [0.8, 0.7, 0.6]], dtype=torch.float64)
    assert scheduler.verify_lengths(survival, torch.tensor([True, True])).tolist() == [3, 3]
    assert scheduler.draft_depth(on(2), 3) == 3


def test_compute_bound_verification_admits_nothing_and_skips_drafting() -> None:
    scheduler = LoadAwareScheduler(VerifyProfile.by_positions((1, 2), (1.0, 0.5)))
    assert scheduler.draft_depth(on(4), 5) == 0
    survival = torch.full((4, 5), 0.99, dtype=torch.float64)
    assert scheduler.verify_lengths(survival, torch.ones(4, dtype=torch.bool)).tolist() == [0, 0, 0, 0]


def test_every_row_verifies_the_width_where_throughput_first_drops() -> None:
    """R = 2, pass time flat to 4 positions, then +1/3 s a position (the rectangle: 2 rows x (1 + w)).

    Θ(0) = 2 / 1; Θ(1) = (2 + 0.9 + 0.5) / 1 = 3.4: rises; Θ(2) = (3.4 + 0.45 + 0.1) / (1 + 2/3) =
    2.37: drops, so both rows verify one draft, row 1 too, whose 0.5 costs nothing in the rectangle
    that row 0's draft opens.
    """
    scheduler = LoadAwareScheduler(VerifyProfile.by_positions((1, 4, 7), (1.0, 1.0, 0.5)))
    survival = torch.tensor([[0.9, 0.45], [0.5, 0.1]], dtype=torch.float64)
    assert scheduler.verify_lengths(survival, on(2)).tolist() == [1, 1]


def reference_width(profile: VerifyProfile, survival: list[list[float]], rows: int) -> int:
    """Θ's first drop by explicit loops: Θ(w) = (n + sum of survival up to column w) x SPS(rows (1 + w))."""
    theta = []
    for w in range(len(survival[0]) + 1):
        tokens = len(survival) + sum(sum(row[:w]) for row in survival)
        theta.append(tokens / seconds(profile, rows, 1 + w))
        if w and theta[w] <= theta[w - 1]:
            return w - 1
    return len(survival[0])


def test_verify_width_matches_an_explicit_loop_and_ignores_inactive_rows_survival() -> None:
    torch.manual_seed(0)
    for knee in (2, 5, 9, 20, 40):
        profile = flat_then_linear(knee)
        scheduler = holding(LoadAwareScheduler(profile), [0.5] * 5)  # measured: the claims hold
        survival = torch.rand(6, 5, dtype=torch.float64).sort(1, descending=True).values.cumprod(1)
        active = torch.tensor([True, True, False, True, True, True])
        expected = reference_width(profile, survival[active].tolist(), rows=6)
        assert scheduler.verify_lengths(survival, active).tolist() == [expected] * 2 + [0] + [expected] * 3


def test_draft_depth_picks_the_best_width_not_the_first_drop() -> None:
    """A step in pass time at 2 positions, flat after it: one draft per row loses, three win."""
    scheduler = LoadAwareScheduler(VerifyProfile.by_positions((1, 2, 8), (1.0, 0.5, 0.5)))
    assert scheduler.draft_depth(on(1), 3) == 3
    assert scheduler.draft_depth(on(1), 1) == 0


def test_inactive_rows_cost_their_place_in_the_pass() -> None:
    """4 rows, 1 active, pass time flat to 4 positions then linear: a draft doubles the rectangle."""
    scheduler = LoadAwareScheduler(flat_then_linear(4))
    assert scheduler.draft_depth(on(1), 1) == 1
    assert scheduler.draft_depth(torch.tensor([True, False, False, False]), 1) == 0


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
    scheduler = LoadAwareScheduler(VerifyProfile.by_positions((1, 2), (1.0, 0.1)))
    plain = generate(target, prompts, 6, seed=3)
    spec = generate(target, prompts, 6, seed=3, drafter=drafter, draft_len=4, policy=scheduler)
    assert spec.tokens == plain.tokens
    assert spec.stats.target_passes == plain.stats.target_passes and spec.stats.drafted == 0


def test_profile_measures_a_real_model_in_inference_mode() -> None:
    """Timed as a decision's text fields run (`Decider` writes them in inference mode): under `no_grad`
    alone a pass costs more, which would price drafting wrong."""
    model = random_model(tiny_config(), seed=0)
    modes = []
    model.register_forward_pre_hook(lambda module, args: modes.append(torch.is_inference_mode_enabled()))
    profile = VerifyProfile.measure(model, rows=(1, 8), context=8, width=3, repeats=1)
    assert profile.rows == (1, 8) and profile.widths == (1, 2, 3)
    assert all(t > 0 for row in profile.seconds for t in row)
    assert modes and all(modes)


def holding(scheduler: LoadAwareScheduler, survival: list[float]) -> LoadAwareScheduler:
    """The drafter's estimates `survival`, every position verified MIN_OUTCOMES times and accepted at
    that rate: positions that are measured, where the drafter's claims hold."""
    scheduler.first_claim = survival[0]
    outcomes = LoadAwareScheduler.MIN_OUTCOMES
    scheduler.verified_at = [float(outcomes)] * len(survival)
    scheduler.accepted_at = [outcomes * s for s in survival]
    scheduler.estimated_at = [outcomes * s for s in survival]
    scheduler.drafted_at = [float(outcomes)] * len(survival)
    scheduler.claimed_at = [outcomes * s for s in survival]
    scheduler.rounds_at = [LoadAwareScheduler.MIN_ROUNDS] * len(survival)
    scheduler.stale_at = [0] * len(survival)
    return scheduler


def measured(
    survival: list[float], draft_seconds_per_token: float, round_ratio: float = 1.0, rows: int = 1
) -> LoadAwareScheduler:
    """A scheduler on a flat profile (1 pass/s) that has measured rounds like these (drafting as deep
    as `survival`, at `draft_seconds_per_token` a token; rounds of `rows` sequences taking
    `round_ratio` times their pass), every position verified MIN_OUTCOMES times and accepted at the
    drafter's estimate."""
    scheduler = holding(LoadAwareScheduler(flat_then_linear(1000)), survival)
    if draft_seconds_per_token:
        scheduler.draft_seconds = {rows: {len(survival): len(survival) * draft_seconds_per_token}}
    scheduler.ratios[rows] = collections.deque([round_ratio])
    return scheduler


def test_measured_drafting_cost_and_low_survival_turn_drafting_off() -> None:
    assert LoadAwareScheduler(flat_then_linear(1000)).draft_depth(on(2), 3) == 3, "nothing measured: optimistic"
    assert measured([0.99, 0.98, 0.97], 0.0, rows=2).draft_depth(on(2), 3) == 3
    low = measured([0.2, 0.04, 0.01], 0.5, rows=2)
    assert low.draft_depth(on(2), 3) == 0, "2.5 tokens per 2.5 s < 2 tokens per s"
    assert measured([0.2, 0.04, 0.01], 0.01, rows=2).draft_depth(on(2), 3) == 2, "a third draft: 0.02 tokens for 0.01 s"
    assert low.draft_depth(on(3), 3) == 3, "drafting measured for two sequences, not three: optimistic"


def test_round_overhead_is_measured_per_number_of_sequences() -> None:
    """Rounds that take far longer than their bare target pass make the drafting time weigh less:
    1 s of drafting for 1.5 more tokens pays where a pass really takes 5 s, not where it takes 1 s."""
    assert measured([0.5, 0.25], 0.5).draft_depth(on(1), 2) == 0
    scheduler = measured([0.5, 0.25], 0.5, round_ratio=5.0)
    scheduler.draft_seconds[2] = scheduler.draft_seconds[1]
    assert scheduler.draft_depth(on(2), 2) == 0, "rounds of two sequences: measured at their pass time"
    assert scheduler.draft_depth(on(1), 2) == 2
    scheduler.verify_lengths(torch.tensor([[0.6, 0.3]], dtype=torch.float64), torch.tensor([True]))
    assert scheduler.first_claim == 0.6 and set(scheduler.draft_seconds[1]) == {2}


def test_a_real_round_is_timed() -> None:
    scheduler = LoadAwareScheduler(flat_then_linear(1000))
    assert scheduler.draft_depth(on(1), 2) == 2
    scheduler.verify_lengths(torch.tensor([[0.9, 0.8]], dtype=torch.float64), torch.tensor([True]))
    assert set(scheduler.draft_seconds) == {1} and set(scheduler.draft_seconds[1]) == {2}
    assert scheduler.draft_seconds[1][2] > 0
    scheduler.record(torch.tensor([2]), torch.tensor([1]))
    assert list(scheduler.extras) == [1] and not scheduler.ratios, "a drafted round measures `extra` only"
    assert scheduler.extras[1][0] == pytest.approx(-0.5, abs=0.05) and scheduler._extra(1) == 0.0
    holding(scheduler, [0.0, 0.0])  # nothing holds: the next round is plain
    assert scheduler.draft_depth(on(1), 2) == 0
    scheduler.record(torch.tensor([0]), torch.tensor([0]))
    assert list(scheduler.ratios) == [1] and 0 < scheduler._ratio(1) < 0.1, "a fast round against a 1 s profile"


def test_one_slow_round_moves_no_round_cost() -> None:
    """Three plain rounds far faster than their profiled 10 ms, then one 20x slower: the median of the
    four is still a fast round's, where a running mean weighing the last round half read about 10."""
    scheduler = LoadAwareScheduler(VerifyProfile.by_positions((1, 1000), (100.0, 100.0)))
    holding(scheduler, [0.0])  # nothing holds: every round is plain
    for pause in (0.0, 0.0, 0.0, 0.2):
        assert scheduler.draft_depth(on(1), 1) == 0
        time.sleep(pause)
        scheduler.record(torch.tensor([0]), torch.tensor([0]))
    assert max(scheduler.ratios[1]) > 15 and scheduler._ratio(1) < 1


def test_drafted_rounds_pay_their_measured_extra_seconds() -> None:
    """A 1 s pass at any width; one draft held 40% of the time (1.4 tokens a round). Drafting is free:
    the draft pays while a drafted round costs what its pass does, not once each takes 0.5 s more."""
    scheduler = measured([0.4], 1e-9)
    assert scheduler.draft_depth(on(1), 1) == 1
    scheduler.extras[1] = collections.deque([0.5, 0.6, 0.4])
    assert scheduler.draft_depth(on(1), 1) == 0
    assert scheduler.verify_lengths(torch.tensor([[0.4]], dtype=torch.float64), on(1)).tolist() == [0]


def test_the_extra_seconds_are_per_verified_draft() -> None:
    """A 10 ms pass at any width, one optimistic round verifying four drafts at 0.4 that took 10 ms
    more: 2.5 ms a draft, so one draft (1.4 tokens in 12.5 ms) beats a plain round (1 in 10 ms),
    where charging a one-draft round the whole 10 ms (1.4 in 20 ms) would not."""
    scheduler = LoadAwareScheduler(VerifyProfile.by_positions((1, 1000), (100.0, 100.0)))
    assert scheduler.draft_depth(on(1), 4) == 4
    assert scheduler.verify_lengths(torch.full((1, 4), 0.4, dtype=torch.float64), on(1)).tolist() == [4]
    time.sleep(0.02)
    scheduler.record(torch.tensor([4]), torch.tensor([0]))
    assert 0.001 < scheduler._extra(1) < 0.004
    assert scheduler.draft_depth(on(1), 1) == 1


def test_one_slow_draft_moves_no_drafting_time() -> None:
    """Three drafts of a token timed fast and one 0.2 s: the median is still a fast one's."""
    scheduler = LoadAwareScheduler(flat_then_linear(1000))
    for pause in (0.0, 0.0, 0.0, 0.2):
        assert scheduler.draft_depth(on(1), 1) == 1
        time.sleep(pause)
        scheduler.verify_lengths(torch.full((1, 1), 0.9, dtype=torch.float64), on(1))
        scheduler.record(torch.tensor([1]), torch.tensor([1]))
    assert max(scheduler.draft_times[1][1]) > 0.15 and scheduler.draft_seconds[1][1] < 0.05


def test_a_run_of_drafted_rounds_is_broken_by_a_plain_one() -> None:
    """`ratio` is measured on plain rounds only: after PLAIN_EVERY drafted rounds in a row, one is plain."""
    scheduler = measured([0.9], 1e-9)
    depths = [scheduler.draft_depth(on(1), 1) for _ in range(2 * LoadAwareScheduler.PLAIN_EVERY + 2)]
    plain = [i for i, depth in enumerate(depths) if depth == 0]
    assert plain == [LoadAwareScheduler.PLAIN_EVERY, 2 * LoadAwareScheduler.PLAIN_EVERY + 1]


def test_after_plain_rounds_worth_fifty_probes_the_drafter_drafts_a_token() -> None:
    """Survival estimates come only from rounds that draft; a drafter whose chances change with the
    text (the lookup drafter's copies) is asked again, one token deep, once the plain rounds since
    took 1 / PROBE_SHARE = 50 times that token's drafting (0.99 s against 1 s rounds: every 51st)."""
    scheduler = measured([0.0, 0.0], 0.99)
    assert float(scheduler._drafting_seconds(1, 1)[1]) == pytest.approx(0.99)
    depths = [scheduler.draft_depth(on(1), 2) for _ in range(102)]
    assert [i for i, depth in enumerate(depths) if depth] == [50, 101] and scheduler.plain_seconds == 0


def test_probes_come_more_often_the_nearer_drafting_is_to_paying() -> None:
    """1 s rounds, 0.99 s to draft a token. A draft that never holds loses its 0.99 s: a probe every
    51st round, as above. One that holds 90% of the time yields 1.9 tokens in 1.99 s, 0.09 s more than
    plain rounds take for them: a probe once plain rounds took more than 50 times that, every 6th.
    At 98% it loses 0.01 s, every other round; at 100% it pays, and only PLAIN_EVERY breaks the run."""

    def probes(rate: float) -> list[int]:
        scheduler = measured([rate], 0.99)
        return [i for i in range(102) if scheduler.draft_depth(on(1), 1)]

    assert probes(0.0) == [50, 101]
    assert probes(0.9) == list(range(5, 102, 6))
    assert probes(0.98) == list(range(1, 102, 2))
    assert len(probes(1.0)) == 102 - 102 // (LoadAwareScheduler.PLAIN_EVERY + 1)


def test_a_probe_of_sequences_in_step_is_priced_at_what_the_slowest_gains() -> None:
    """Four sequences, a 1 s pass for all of them, 0.99 s to draft a token, 90% held. A batch lasts as
    long as its slowest sequence, so the round's 1.99 s advance it by a second token only where all
    four drafts hold (0.9^4): 0.33 s lost, a probe once plain rounds took 50 times that, every 18th
    (crediting each sequence's expected tokens, 3.6 in 1.99 s, priced it at 0.09 s: every 6th)."""
    scheduler = measured([0.9], 0.99, rows=4)
    depths = [scheduler.draft_depth(on(4), 1) for _ in range(102)]
    assert [i for i, depth in enumerate(depths) if depth] == list(range(17, 102, 18))


def test_a_probe_verifies_its_draft_whatever_the_drafter_claims() -> None:
    """A probe exists to measure acceptance, so it verifies its one draft even where the drafter's
    claim (here 0.0) would not open a width; a round that is no probe, on the same claim, verifies
    nothing."""
    scheduler = measured([0.0], 0.99)
    depths = [scheduler.draft_depth(on(1), 1) for _ in range(51)]
    assert depths[-1] == 1 and not any(depths[:-1])
    claim = torch.tensor([[0.0]], dtype=torch.float64)
    assert scheduler.verify_lengths(claim, on(1)).tolist() == [1]
    scheduler.record(torch.tensor([1]), torch.tensor([0]))
    holding(scheduler, [1.0])  # a round that drafts on its estimate, not as a probe
    assert scheduler.draft_depth(on(1), 1) == 1
    assert scheduler.verify_lengths(claim, on(1)).tolist() == [0]


def test_until_the_first_draft_is_measured_every_round_verifies_one() -> None:
    """A fresh scheduler whose drafter claims nothing would open no width on its claims, and learn
    nothing: until the first position has MIN_OUTCOMES outcomes, every round drafts and verifies its
    first draft, the optimistic first one (three deep) included. At one draft a round, fading by
    1 - 1 / WINDOW a draft, that takes 10 rounds (9.06 by the sum of the fades)."""
    scheduler = LoadAwareScheduler(flat_then_linear(1000))
    depths = []
    while not scheduler._measured(0):
        depth = scheduler.draft_depth(on(1), 3)
        claim = torch.zeros(1, depth, dtype=torch.float64)
        assert depth and scheduler.verify_lengths(claim, on(1)).tolist() == [1]
        scheduler.record(torch.tensor([1]), torch.tensor([0]))
        depths.append(depth)
    assert depths == [3] + [1] * 9
    assert scheduler._expected_survival(1) == [0.0]


def faded(history: list[int], rows: int = 1) -> list[float]:
    """The weight of each round's counts after `history`'s rounds of `rows` verified drafts each:
    (1 - 1 / WINDOW) less per later draft verified at the same position."""
    per_round = (1 - 1 / LoadAwareScheduler.WINDOW) ** rows
    return [per_round ** (len(history) - 1 - i) for i in range(len(history))]


def test_acceptance_is_measured_over_the_recent_drafts() -> None:
    """Four verified rounds of ten rows at 0.9, then six at 0.1: each draft's outcome weighs
    1 - 1 / WINDOW less per later draft, so the estimate is 0.189 (by an explicit sum), near the new
    0.1: the last 60 drafts outweigh the 40 before them about eight to one."""
    scheduler = LoadAwareScheduler(flat_then_linear(1000))
    history = [9] * 4 + [1] * 6
    for accepted in history:
        scheduler.verify_lengths(torch.full((10, 1), 0.5, dtype=torch.float64), on(10))
        scheduler.record(torch.ones(10, dtype=torch.int64), (torch.arange(10) < accepted).to(torch.int64))
    weights = faded(history, rows=10)
    expected = sum(w * a for w, a in zip(weights, history, strict=True)) / (10 * sum(weights))
    assert scheduler._expected_survival(1)[0] == pytest.approx(expected) and 0.18 < expected < 0.20


def test_observed_acceptance_overrides_the_drafters_optimism() -> None:
    """The drafter claims 0.9 survival; the accept rule accepted nothing in 8 rounds: stop drafting."""
    scheduler = measured([0.9, 0.8], 0.1)
    scheduler.verified_at, scheduler.accepted_at, scheduler.estimated_at = [], [], []  # nothing verified yet
    assert scheduler.draft_depth(on(1), 2) == 2
    for _ in range(LoadAwareScheduler.MIN_OUTCOMES):
        scheduler.record(torch.tensor([2, 0]), torch.tensor([0, 0]))
    assert scheduler.verified_at == [8.0, 8.0] and scheduler.accepted_at == [0.0, 0.0]
    fresh = measured([0.9, 0.8], 0.1)
    fresh.verified_at, fresh.accepted_at = scheduler.verified_at, scheduler.accepted_at
    assert fresh.draft_depth(on(1), 2) == 0


def test_one_sequence_verifying_one_draft_a_round_keeps_a_steady_rate() -> None:
    """At one sequence a round verifies one draft. A first draft holding 37% of the time, one round
    at a time, 2,000 rounds after a warm-up of 100 (draws fixed by a seed): the estimate never falls
    to 0.2, where in the shipped model's costs at one sequence a drafted round pays from about 0.18.
    A fade of 0.9 a round (the last ten rounds, as before 2026-12-05), over the same draws, falls
    to 0.11, and a scheduler reading it stops drafting until a probe."""
    generator = torch.Generator().manual_seed(0)
    scheduler = LoadAwareScheduler(flat_then_linear(1000))
    estimates, by_rounds, counts = [], [], [0.0, 0.0]
    for round_ in range(2100):
        scheduler.verify_lengths(torch.full((1, 1), 0.5, dtype=torch.float64), on(1))
        held = int(torch.rand(1, generator=generator) < 0.37)
        scheduler.record(torch.tensor([1]), torch.tensor([held]))
        counts = [0.9 * counts[0] + held, 0.9 * counts[1] + 1]
        if round_ >= 100:
            estimates.append(scheduler._expected_survival(1)[0])
            by_rounds.append(counts[0] / counts[1])
    assert min(estimates) > 0.2 and min(by_rounds) < 0.12
    assert statistics.mean(estimates) == pytest.approx(0.37, abs=0.02)


def test_a_position_no_round_verifies_keeps_its_measured_rate() -> None:
    """Position 2 of a drafter claiming (0.9, 0.8) held 1 in 10 over 20 rounds, position 1 every
    time; then 20 rounds verify position 1 only. Position 2's counts do not fade, so its measured
    rate still rules: the round drafts one token (2 tokens in 1.2 s beat 2.1 in 1.4 s), where on
    nothing measured it drafts two."""
    profile = VerifyProfile.by_positions((1, 2, 3), (1.0, 1 / 1.2, 1 / 1.4))
    claims = torch.tensor([[0.9, 0.8]], dtype=torch.float64)
    assert LoadAwareScheduler(profile).draft_depth(on(1), 2) == 2
    scheduler = LoadAwareScheduler(profile)
    history = ([1] + [0] * 9) * 2
    for held in history:
        scheduler.verify_lengths(claims, on(1))
        scheduler.record(torch.tensor([2]), torch.tensor([1 + held]))
    verified, accepted = scheduler.verified_at[1], scheduler.accepted_at[1]
    for _ in range(20):
        assert scheduler.verify_lengths(claims[:, :1], on(1)).tolist() == [1]
        scheduler.record(torch.tensor([1]), torch.tensor([1]))
    assert scheduler.verified_at[1] == verified, "no draft verified there: no fading"
    assert scheduler.draft_depth(on(1), 2) == 1
    assert scheduler._expected_survival(2)[1] == pytest.approx(accepted / verified)
    assert 0.05 < accepted / verified < 0.15


def test_drafting_time_by_depth_is_the_least_squares_line_through_the_measured_depths() -> None:
    """The body drafting times of 2026-12-07 (3.1, 3.6, 5.1, 5.0, 6.4 ms at depths 1, 2, 3, 5, 7):
    priced on numpy's least-squares line, so depth 3 costs less than its one noisy median."""
    scheduler = LoadAwareScheduler(flat_then_linear(1000))
    measured = {1: 3.1e-3, 2: 3.6e-3, 3: 5.1e-3, 5: 5.0e-3, 7: 6.4e-3}
    scheduler.draft_seconds = {1: measured}
    slope, base = np.polyfit(list(measured), list(measured.values()), 1)
    priced = scheduler._drafting_seconds(7, 1)
    assert priced == pytest.approx([0.0] + [base + slope * d for d in range(1, 8)])
    assert priced[3] < measured[3] and priced[5] > measured[5]
    assert scheduler._drafting_seconds(7, 4) == [0.0] * 8, "measured at one sequence, not four"


@pytest.mark.parametrize(
    ("measured", "expected"),
    [
        ({2: 0.4}, [0.0, 0.2, 0.4, 0.6]),  # one depth: the line through it and 0
        ({1: 0.5, 3: 0.3}, [0.0, 0.4, 0.4, 0.4]),  # falling with depth: flat at the mean
        ({1: 0.1, 3: 0.9}, [0.0, 0.28, 0.56, 0.84]),  # -0.3 + 0.4 d, below 0 at depth 0: through 0
    ],
)
def test_the_fitted_drafting_time_never_falls_with_depth_nor_starts_below_zero(
    measured: dict[int, float], expected: list[float]
) -> None:
    scheduler = LoadAwareScheduler(flat_then_linear(1000))
    scheduler.draft_seconds = {1: measured}
    assert scheduler._drafting_seconds(3, 1) == pytest.approx(expected)


def test_a_fixed_drafting_cost_makes_one_deep_draft_pay_where_a_shallow_one_does_not() -> None:
    """Drafting costs 1 s at any depth (measured at 1 and 4), a plain round 1 s for 1 token. One
    draft of survival 0.9: 1.9 tokens in 2 s, below plain; four (0.9, 0.81, 0.73, 0.66): 4.1 in 2 s."""
    scheduler = measured([0.9, 0.81, 0.73, 0.66], 0.0)
    scheduler.draft_seconds = {1: {1: 1.0, 4: 1.0}}
    assert scheduler.draft_depth(on(1), 1) == 0
    assert scheduler.draft_depth(on(1), 4) == 4


def test_past_rounds_calibrate_the_drafters_claims_before_a_round_drafts() -> None:
    """A pass of 2 positions takes 1.5 s, of 1 position 1 s. A drafter claiming 0.9 opens width 1
    (1.9 tokens in 1.5 s beat 1 in 1 s); once a quarter of its 0.9 claims have held, its 0.9 counts
    as 0.225 (1.225 tokens in 1.5 s) and the next round is plain. The verify cut of a round that has
    drafted reads that factor below 1 as 1: the depth was priced on it."""
    scheduler = LoadAwareScheduler(VerifyProfile.by_positions((1, 2), (1.0, 1 / 1.5)))
    claim = torch.tensor([[0.9]], dtype=torch.float64)
    assert scheduler.verify_lengths(claim, on(1)).tolist() == [1]
    held = []
    while True:
        held.append(int(len(held) % 4 == 0))
        scheduler.record(torch.tensor([1]), torch.tensor([held[-1]]))
        if scheduler.verified_at[0] >= LoadAwareScheduler.MIN_OUTCOMES:
            break
        assert scheduler.verify_lengths(claim, on(1)).tolist() == [1], "too few outcomes to calibrate on"
    weights = faded(held)
    assert scheduler.estimated_at == pytest.approx([0.9 * sum(weights)])
    assert scheduler.accepted_at == pytest.approx([sum(w * h for w, h in zip(weights, held, strict=True))])
    factor = scheduler.accepted_at[0] / scheduler.estimated_at[0]
    assert scheduler._expected_survival(1)[0] == pytest.approx(0.9 * factor)
    assert scheduler.draft_depth(on(1), 1) == 0
    assert scheduler.verify_lengths(claim, on(1)).tolist() == [1]


def test_a_later_position_not_yet_measured_counts_as_holding_whenever_the_one_before_held() -> None:
    """A pass of 1, 2 and 3 positions takes 1, 1.2 and 1.4 s. The first draft is measured holding
    0.6 of the time; the drafter claims (0.6, 0.1) for a round's two drafts, on which the second
    would not be verified (1.7 tokens in 1.4 s lose to 1.6 in 1.2 s). Until it is measured it
    counts as 0.6, holding whenever the first held (2.2 tokens in 1.4 s), and is verified; measured
    holding 1 in 10 after MIN_OUTCOMES verifications, it is left alone, and a third position,
    still unmeasured, counts as the second's measured rate."""
    profile = VerifyProfile.by_positions((1, 2, 3), (1.0, 1 / 1.2, 1 / 1.4))
    scheduler = holding(LoadAwareScheduler(profile), [0.6])
    claims = torch.tensor([[0.6, 0.1]], dtype=torch.float64)
    assert scheduler._calibrated_sums(claims, [0.6, 0.1]) == pytest.approx([0.6, 0.6])
    rounds = 0
    while not scheduler._measured(1):
        assert scheduler.verify_lengths(claims, on(1)).tolist() == [2]
        scheduler.record(torch.tensor([2]), torch.tensor([2 if rounds % 10 == 0 else 1]))
        rounds += 1
    assert rounds == 10
    assert scheduler.verify_lengths(claims, on(1)).tolist() == [1]
    three = torch.tensor([[0.6, 0.1, 0.05]], dtype=torch.float64)
    sums = scheduler._calibrated_sums(three, [0.6, 0.1, 0.05])
    assert sums[2] == sums[1] < 0.2
    expected = scheduler._expected_survival(3)
    assert expected[2] == expected[1] == pytest.approx(scheduler.accepted_at[1] / scheduler.verified_at[1])
    assert LoadAwareScheduler(profile).verify_lengths(claims, on(1)).tolist() == [2], "nothing measured: optimistic"


def test_one_wide_round_measures_no_position() -> None:
    """A first round of 32 sequences verifying two drafts each, in which 12 first drafts held and 2
    second ones (a subject line's first tokens), leaves the second position unmeasured: at one
    sequence, the first taken as measured, the second still counts as holding whenever the first
    held and is verified (a pass of 1, 2 and 3 positions takes 1, 1.2 and 1.4 s). Measured on that
    one round, on the drafter's claim of 0.1, it would not be, and a position no round verifies
    keeps its rate."""
    profile = VerifyProfile.by_positions((1, 2, 3), (1.0, 1 / 1.2, 1 / 1.4))
    scheduler = LoadAwareScheduler(profile)
    scheduler.record(torch.full((32,), 2), torch.tensor([2] * 2 + [1] * 10 + [0] * 20))
    scheduler.estimated_at = [32 * 0.6, 32 * 0.1]  # the drafter claimed 0.6 and 0.1 for every sequence
    assert scheduler.verified_at[1] >= LoadAwareScheduler.MIN_OUTCOMES
    assert not scheduler._measured(0) and not scheduler._measured(1)
    scheduler.rounds_at[0] = LoadAwareScheduler.MIN_ROUNDS
    claims = torch.tensor([[0.6, 0.1]], dtype=torch.float64)
    assert scheduler.verify_lengths(claims, on(1)).tolist() == [2]
    scheduler.rounds_at[1] = LoadAwareScheduler.MIN_ROUNDS
    assert scheduler.verify_lengths(claims, on(1)).tolist() == [1]


def test_a_position_measured_low_is_measured_again_after_stale_rounds() -> None:
    """The second position measured holding 6 times in 100, the third 5 (a pass of 1, 2 and 3
    positions takes 1, 1.2 and 1.4 s): rounds verify one draft. After STALE_ROUNDS of them the
    second position's counts are dropped, so it counts as holding whenever the first held and is
    verified again; the third keeps its measured rate."""
    profile = VerifyProfile.by_positions((1, 2, 3), (1.0, 1 / 1.2, 1 / 1.4))
    scheduler = holding(LoadAwareScheduler(profile), [0.6, 0.06, 0.05])
    claims = torch.tensor([[0.6, 0.06, 0.05]], dtype=torch.float64)
    for _ in range(LoadAwareScheduler.STALE_ROUNDS):
        assert scheduler._measured(1)
        assert scheduler.verify_lengths(claims, on(1)).tolist() == [1]
        scheduler.record(torch.tensor([1]), torch.tensor([1]))
    assert not scheduler._measured(1) and scheduler._measured(2)
    assert scheduler.verify_lengths(claims, on(1)).tolist() == [2]


def test_a_position_not_yet_measured_never_makes_a_round_draft_on_its_own() -> None:
    """A pass of 1, 2 and 3 positions takes 1, 1.3 and 1.4 s; only the first draft is measured. At
    0.25 it does not pay alone (1.25 tokens in 1.3 s), and the round is plain, though a second
    draft counted as holding whenever the first held would (1.5 tokens in 1.4 s): re-measuring a
    forgotten position would otherwise draft where drafting does not pay. At 0.35 the first pays
    (1.35 in 1.3 s), and the second rides along on that count (1.7 in 1.4 s)."""
    profile = VerifyProfile.by_positions((1, 2, 3), (1.0, 1 / 1.3, 1 / 1.4))
    assert holding(LoadAwareScheduler(profile), [0.25]).draft_depth(on(1), 2) == 0
    assert holding(LoadAwareScheduler(profile), [0.35]).draft_depth(on(1), 2) == 2


def test_a_positions_rate_is_read_over_every_draft_made_there_not_the_verified_ones() -> None:
    """Rounds alternate a drafter's claims (0.9, 0.8) and (0.9, 0.1) for two drafts, each holding as
    claimed (draws fixed by a seed; a pass of 1, 2 and 3 positions takes 1, 1.2 and 1.4 s). Once the
    second position is measured, the cut verifies it only where 0.8 is claimed, so accepted over
    verified reads about 0.8 there. The rate the depth prices is the mean over every round, 0.45."""
    profile = VerifyProfile.by_positions((1, 2, 3), (1.0, 1 / 1.2, 1 / 1.4))
    generator = torch.Generator().manual_seed(0)
    scheduler = LoadAwareScheduler(profile)
    widths = []
    for round_ in range(600):
        second = 0.8 if round_ % 2 else 0.1
        width = int(scheduler.verify_lengths(torch.tensor([[0.9, second]], dtype=torch.float64), on(1))[0])
        draw = float(torch.rand(1, generator=generator))
        held = (draw < 0.9) + (draw < second)
        scheduler.record(torch.tensor([width]), torch.tensor([min(held, width)]))
        widths.append((second, width))
    assert {w for s, w in widths[100:] if s == 0.1} == {1} and {w for s, w in widths[100:] if s == 0.8} == {2}
    assert scheduler.accepted_at[1] / scheduler.verified_at[1] > 0.65
    assert scheduler._expected_survival(2)[1] == pytest.approx(0.45, abs=0.1)


def test_the_verify_cut_counts_the_rounds_drafting_in_every_width() -> None:
    """Two drafts measured holding as claimed, (0.9, 0.25); a pass of 1, 2 and 3 positions takes 1,
    1.2 and 1.4 s. With drafting free the cut stops at one (1.9 tokens in 1.2 s beat 2.15 in 1.4 s);
    with the two drafts' 1 s spent, it verifies both (2.15 in 2.4 s beat 1.9 in 2.2 s)."""
    profile = VerifyProfile.by_positions((1, 2, 3), (1.0, 1 / 1.2, 1 / 1.4))
    claims = torch.tensor([[0.9, 0.25]], dtype=torch.float64)
    assert holding(LoadAwareScheduler(profile), [0.9, 0.25]).verify_lengths(claims, on(1)).tolist() == [1]
    scheduler = holding(LoadAwareScheduler(profile), [0.9, 0.25])
    scheduler.draft_seconds = {1: {2: 1.0}}
    assert scheduler.verify_lengths(claims, on(1)).tolist() == [2]


@pytest.mark.parametrize(("accepted", "expected"), [(0.5, 0.3), (1.5, 0.45), (4.0, 1.0)])
def test_the_cut_raises_claims_that_ran_low_and_leaves_those_that_ran_high(accepted: float, expected: float) -> None:
    """The first position measured accepted at `accepted` times the drafter's claims: a claim of 0.3
    is read as `expected` (at most 1), and never below the claim."""
    scheduler = holding(LoadAwareScheduler(flat_then_linear(1000)), [0.3])
    scheduler.accepted_at = [accepted * a for a in scheduler.accepted_at]
    claim = torch.tensor([[0.3]], dtype=torch.float64)
    assert scheduler._calibrated_sums(claim, [0.3]) == pytest.approx([expected])
