"""`GenerationStats`' per-position counts against an explicit loop over rounds."""

import math

import torch

from jev.generate.loop import GenerationStats


def by_loop(rounds: list[tuple[int, int]], width: int) -> tuple[list[float], list[float]]:
    """Survival and conditional acceptance per position, counted round by round."""
    survival, conditional = [], []
    for j in range(width):
        verified = [(v, a) for v, a in rounds if v > j]
        reached = [(v, a) for v, a in verified if a >= j]
        held = [(v, a) for v, a in verified if a > j]
        survival.append(len(held) / len(verified) if verified else math.nan)
        conditional.append(len(held) / len(reached) if reached else math.nan)
    return survival, conditional


def test_positions_match_an_explicit_loop() -> None:
    generator = torch.Generator().manual_seed(0)
    stats, rounds = GenerationStats(), []
    for _ in range(40):
        n_verified = torch.randint(0, 6, (3,), generator=generator)
        n_accepted = (torch.rand(3, generator=generator) * (n_verified + 1)).floor().long()
        stats.count_positions(n_verified, n_accepted, int(n_verified.max()))
        rounds += list(zip(n_verified.tolist(), n_accepted.tolist(), strict=True))
    survival, conditional = by_loop(rounds, len(stats.verified_at))
    assert len(stats.verified_at) == 5
    for mine, theirs in ((stats.survival, survival), (stats.conditional_acceptance, conditional)):
        assert all(math.isclose(a, b) or (math.isnan(a) and math.isnan(b)) for a, b in zip(mine, theirs, strict=True))
    assert stats.conditional_acceptance[1] > stats.survival[1], "after the first: conditional, not survival"


def test_survival_sums_to_the_accepted_drafts_at_a_fixed_length() -> None:
    stats = GenerationStats()
    n_accepted = torch.tensor([0, 1, 3, 2, 3, 0])
    stats.count_positions(torch.full((6,), 3), n_accepted, 3)
    assert math.isclose(sum(stats.survival), n_accepted.sum().item() / 6)
    assert stats.conditional_acceptance == [4 / 6, 3 / 4, 2 / 3]
