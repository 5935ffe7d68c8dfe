"""Exact losslessness: the joint law of the first three emitted tokens equals the target's (float64).

Target: a random trigram table; drafter: a random bigram table near the target's average. Both
are prefix-dependent, so conditioning bugs show. The oracle enumerates every drafted block under
q and every verify length of a random (prefix-dependent, token-blind) policy, takes each round's
outcome law from `jev.generate.accept.outcome_distribution` (the law `accept_block` samples from)
with p and q from `jev.generate.accept.warp`, and recurses until three tokens are out. Drafts past
the third emitted token cannot change the first three, so positions past it are filled with a
fixed token: the mass of "m >= need" is the prefix survival whatever they hold.
"""

import itertools
from dataclasses import dataclass

import pytest
import torch

from jev.generate import accept
from jev.generate.accept import SamplingSettings, outcome_distribution, warp

V = 16
FIRST = 3


pytestmark = pytest.mark.usefixtures("one_thread")


@dataclass(frozen=True)
class Case:
    k: int
    temperature: float
    top_k: int = 0
    top_p: float = 1.0
    random_policy: bool = False
    drafter_warped: bool = True


CASES = [
    *(Case(k, t, random_policy=(k + int(10 * t)) % 2 == 0) for k in range(1, 6) for t in (0.7, 1.0, 1.5)),
    Case(3, 1.0, top_k=5),
    Case(4, 0.7, top_p=0.8, random_policy=True),
    Case(2, 1.5, top_k=6, top_p=0.9),
    Case(5, 1.0, top_k=4, top_p=0.7, random_policy=True),
    Case(3, 0.0, random_policy=True),
    Case(4, 1.0, top_p=0.85, drafter_warped=False),
]


class Oracle:
    """Exact law of the first `need` emitted tokens from a context, by enumeration and recursion."""

    def __init__(self, case: Case, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.case = case
        self.target = 1.5 * torch.randn(V, V, V, generator=gen, dtype=torch.float64)
        self.draft = self.target.mean(0) + 0.7 * torch.randn(V, V, generator=gen, dtype=torch.float64)
        self.policy = torch.distributions.Dirichlet(torch.ones(case.k + 1, dtype=torch.float64)).sample((V, V))
        self.settings = SamplingSettings.build(1, case.temperature, case.top_k, case.top_p)
        self.draft_settings = self.settings if case.drafter_warped else SamplingSettings.build(1)
        self.memo: dict[tuple[int, int, int], torch.Tensor] = {}

    def p(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        logits = self.target[a, b]
        return warp(logits.unsqueeze(0), self.settings)[0]

    def q(self, b: torch.Tensor) -> torch.Tensor:
        return warp(self.draft[b].unsqueeze(0), self.draft_settings)[0]

    def target_law(self, a: int, b: int) -> torch.Tensor:
        """`[V, V, V]` P(t1, t2, t3) under plain decoding."""
        first = self.p(torch.tensor(a), torch.tensor(b))
        second = self.p(torch.full((V,), b), torch.arange(V))
        pairs = torch.cartesian_prod(torch.arange(V), torch.arange(V))
        third = self.p(pairs[:, 0], pairs[:, 1]).view(V, V, V)
        return first.view(V, 1, 1) * second.view(V, V, 1) * third

    def law(self, a: int, b: int, need: int) -> torch.Tensor:
        key = (a, b, need)
        if key not in self.memo:
            self.memo[key] = self._law(a, b, need)
        return self.memo[key]

    def _law(self, a: int, b: int, need: int) -> torch.Tensor:
        k = self.case.k
        width = min(k, need)
        grid = torch.cartesian_prod(*[torch.arange(V)] * width).view(-1, width)
        n_drafts = grid.shape[0]
        drafts = torch.cat((grid, torch.zeros(n_drafts, k - width, dtype=torch.int64)), dim=1)
        seq = torch.cat((torch.tensor([a, b]).expand(n_drafts, 2), drafts), dim=1)
        p = torch.stack([self.p(seq[:, j], seq[:, j + 1]) for j in range(k + 1)], dim=1)
        q = torch.stack([self.q(seq[:, j + 1]) for j in range(k)], dim=1)
        draft_prob = q[:, :width].gather(-1, grid.unsqueeze(-1)).squeeze(-1).prod(1)
        weights = self.policy[a, b] if self.case.random_policy else torch.eye(k + 1, dtype=torch.float64)[k]
        lengths = torch.arange(k + 1).repeat_interleave(n_drafts)
        outcome = outcome_distribution(p.repeat(k + 1, 1, 1), q.repeat(k + 1, 1, 1), drafts.repeat(k + 1, 1), lengths)
        outcome = (weights.view(-1, 1, 1, 1) * outcome.view(k + 1, n_drafts, k + 1, V)).sum(0)
        joint = torch.zeros([V] * need, dtype=torch.float64)
        self._add(joint, outcome * draft_prob.view(-1, 1, 1), grid, a, b, need, width)
        return joint

    def _add(
        self, joint: torch.Tensor, outcome: torch.Tensor, grid: torch.Tensor, a: int, b: int, need: int, width: int
    ) -> None:
        flat = joint.view(-1)
        if width == need:
            flat += outcome[:, need:].sum((1, 2))
        for m in range(min(width, need - 1) + 1):
            by_prefix = outcome[:, m].reshape(V**m, V ** (width - m), V).sum(1)
            if m == need - 1:
                flat += by_prefix.flatten()
                continue
            for index, prefix in enumerate(itertools.product(range(V), repeat=m)):
                for y in range(V):
                    weight = by_prefix[index, y]
                    if weight > 0:
                        emitted = (*prefix, y)
                        tail = (a, b, *emitted)[-2:]
                        joint[emitted] += weight * self.law(tail[0], tail[1], need - m - 1)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=str)
def test_first_three_tokens_have_the_target_law(case: Case) -> None:
    torch.manual_seed(7)
    oracle = Oracle(case)
    law = oracle.law(3, 5, FIRST)
    assert float(law.sum()) == pytest.approx(1.0, abs=1e-12)
    assert float((law - oracle.target_law(3, 5)).abs().max()) <= 1e-12


def test_oracle_catches_a_residual_drawn_from_p(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accept, "recovery_distribution", lambda p, q: p)
    torch.manual_seed(7)
    oracle = Oracle(Case(2, 1.0))
    assert float((oracle.law(3, 5, FIRST) - oracle.target_law(3, 5)).abs().max()) > 1e-3
