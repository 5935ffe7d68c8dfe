"""How many drafted tokens each sequence verifies per round: fixed, or load-aware (DSpark Algorithm 1).

Verification is nearly free while the target pass is memory-bound and stops being free once the
batch's total tokens make it compute-bound. `LoadAwareScheduler` profiles the target's verify-pass
rate SPS(B) (passes per second for B tokens in the batch) once, then each round admits drafted
tokens across all active requests greedily by estimated prefix survival a_{r,j} while the
expected tokens per second `tau * SPS(B)` rises, and stops at the first drop. It reads only the
survival estimates, never the drafted tokens, and entry j of the estimate is computed before x_j
is drawn, so the decision to verify x_j never depends on x_j or later tokens (DSpark App. A).
"""

import math
import statistics
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Protocol

import torch

from jev.model import Model


class VerifyPolicy(Protocol):
    """The scheduler's interface to `generate`: one decision before drafting, one after."""

    def draft_depth(self, n_active: int, draft_len: int) -> int:
        """How many tokens to draft this round (0: plain decoding step, the drafter does not run)."""

    def verify_lengths(self, survival: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        """`survival [B, K]`, `active [B]` -> `[B]` how many drafts (a prefix) each sequence verifies."""

    def record(self, n_verified: torch.Tensor, n_accepted: torch.Tensor) -> None:
        """After the accept rule: `[B]` drafts verified and accepted this round (for later rounds only)."""


class FixedLength:
    """Draft and verify `draft_len` tokens for every active sequence, whatever the load."""

    def draft_depth(self, n_active: int, draft_len: int) -> int:
        return draft_len

    def verify_lengths(self, survival: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        return torch.where(active, survival.shape[1], 0).to(torch.int64)

    def record(self, n_verified: torch.Tensor, n_accepted: torch.Tensor) -> None:
        """A fixed length learns nothing from outcomes."""


@dataclass(frozen=True)
class VerifyProfile:
    """Measured target verify passes per second by total batch tokens (ascending `tokens`)."""

    tokens: tuple[int, ...]
    steps_per_second: tuple[float, ...]

    def sps(self, total: int) -> float:
        """Passes/s for `total` tokens: linear in pass time between measured points, extrapolated past them."""
        return float(self.sps_many(torch.tensor([total]))[0])

    def sps_many(self, totals: torch.Tensor) -> torch.Tensor:
        """`sps` of every entry of `totals` at once (float64): the scheduler asks for hundreds per round."""
        tokens = torch.tensor(self.tokens, dtype=torch.float64)
        seconds = 1.0 / torch.tensor(self.steps_per_second, dtype=torch.float64)
        totals = totals.to(torch.float64)
        if len(tokens) == 1:
            return torch.full_like(totals, self.steps_per_second[0])
        upper = torch.searchsorted(tokens, totals).clamp(1, len(tokens) - 1)
        lo, hi = tokens[upper - 1], tokens[upper]
        t = seconds[upper - 1] + (seconds[upper] - seconds[upper - 1]) * (totals - lo) / (hi - lo)
        t = torch.where(totals <= tokens[0], seconds[0], t)
        return 1.0 / t.clamp(min=1e-12)

    @classmethod
    @torch.no_grad()
    def measure(
        cls,
        model: Model,
        totals: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
        context: int = 32,
        width: int = 5,
        repeats: int = 3,
        lock: AbstractContextManager | None = None,
    ) -> "VerifyProfile":
        """Time one cached target pass of `total` new tokens, laid out as rows of up to `width` tokens.

        Each row first holds `context` cached positions. Neither token ids nor cached values change
        a pass's cost, so the cache is not prefilled: its zero positions are committed as they are.
        The median of `repeats` timings is kept; the cache is rolled back between them. Each timed
        pass runs under `lock` (the decider's compute lock), never beside another pass.
        """
        lock = lock or nullcontext()
        rates = []
        for total in totals:
            rows = math.ceil(total / width)
            cache = model.new_cache(rows, context + width)
            cache.advance(torch.full((rows,), context, dtype=torch.int64, device=cache.lengths.device))
            lengths = torch.full((rows,), total // rows, dtype=torch.int64)
            lengths[: total % rows] += 1
            new = torch.zeros(rows, int(lengths.max()), dtype=torch.int64, device=model.device)
            timings = []
            for _ in range(repeats):
                with lock:
                    started = time.perf_counter()
                    model(new, cache=cache, lengths=lengths)
                    timings.append(time.perf_counter() - started)
                cache.truncate(torch.full((rows,), context))
            rates.append(1.0 / statistics.median(timings))
        return cls(tokens=tuple(totals), steps_per_second=tuple(rates))


class LoadAwareScheduler:
    """DSpark's hardware-aware prefix scheduler (Algorithm 1, with the early break), which also
    weighs what the profile cannot see: the drafter's own time, and how much longer a whole round
    (sampling filter, accept rule, bookkeeping) takes than the bare target pass.

    Each round it times itself: the drafter between `draft_depth` and `verify_lengths`, the target
    pass and the accept rule until `record`, separately for drafted and plain rounds. Those
    measurements and the acceptance seen so far (`record`: of the drafts verified at position j,
    how many were accepted; the drafter's own survival estimates until a position has been
    verified MIN_OUTCOMES times) decide whether the next round drafts at all; the first round,
    with nothing measured, is optimistic. All of it comes from past rounds, so no verify decision
    depends on the tokens it decides about.
    """

    MIN_OUTCOMES = 8

    def __init__(self, profile: VerifyProfile) -> None:
        self.profile = profile
        self.draft_seconds_per_token = 0.0
        self.round_ratio = {"drafted": 1.0, "plain": 1.0}
        self.expected_survival: torch.Tensor | None = None
        self.verified_at = torch.zeros(0, dtype=torch.float64)
        self.accepted_at = torch.zeros(0, dtype=torch.float64)
        self._mark: tuple[str, float, float] | None = None
        self._draft_started: tuple[float, int] | None = None

    def draft_depth(self, n_active: int, draft_len: int) -> int:
        """How many tokens to draft this round; 0 when drafting is not expected to pay.

        With every survival equal to 1 each admission's gain `a / tau` is the largest it can be, so
        Algorithm 1 on all-ones admits at least as many tokens as on the real estimates: that
        bounds any request's verify length. Once rounds have been measured, the round is drafted
        only if the expected tokens per second, drafting time and measured round overhead
        included, beat a plain step's.
        """
        self._mark = None
        self._draft_started = None
        if n_active == 0 or draft_len == 0:
            return 0
        ones = torch.ones(n_active, draft_len, dtype=torch.float64)
        depth = min(draft_len, int(self._admitted(ones).sum()))
        if depth and not self._drafting_pays(n_active, depth):
            depth = 0
        if depth:
            self._draft_started = (time.perf_counter(), depth)
        else:
            self._start_round("plain", n_active)
        return depth

    def _drafting_pays(self, n_active: int, depth: int) -> bool:
        if self.expected_survival is None:
            return True
        estimate = torch.ones(depth, dtype=torch.float64)
        known = min(depth, len(self.expected_survival))
        estimate[:known] = self.expected_survival[:known]
        seen = min(depth, len(self.verified_at))
        counted = self.verified_at[:seen] >= self.MIN_OUTCOMES
        observed = self.accepted_at[:seen] / self.verified_at[:seen].clamp(min=1)
        estimate[:seen] = torch.where(counted, observed, estimate[:seen])
        admitted = self._admitted(estimate.expand(n_active, depth))
        tokens = int(admitted.sum())
        expected = n_active + float(estimate.expand(n_active, depth)[admitted].sum())
        drafted = self.round_ratio["drafted"] / self.profile.sps(n_active + tokens)
        plain = self.round_ratio["plain"] / self.profile.sps(n_active)
        return expected / (drafted + depth * self.draft_seconds_per_token) > n_active / plain

    def record(self, n_verified: torch.Tensor, n_accepted: torch.Tensor) -> None:
        """Close the round's timing; count, per draft position, how often it was verified and accepted."""
        self._finish_round()
        width = int(n_verified.max()) if n_verified.numel() else 0
        if width > len(self.verified_at):
            grow = width - len(self.verified_at)
            self.verified_at = torch.cat((self.verified_at, torch.zeros(grow, dtype=torch.float64)))
            self.accepted_at = torch.cat((self.accepted_at, torch.zeros(grow, dtype=torch.float64)))
        positions = torch.arange(width).view(1, -1)
        self.verified_at[:width] += (positions < n_verified.cpu().view(-1, 1)).sum(0)
        self.accepted_at[:width] += (positions < n_accepted.cpu().view(-1, 1)).sum(0)

    def _start_round(self, kind: str, tokens: int) -> None:
        self._mark = (kind, time.perf_counter(), 1.0 / self.profile.sps(tokens))

    def _finish_round(self) -> None:
        """Fold the last round's measured time over the profile's prediction into the running ratio."""
        if self._mark is not None:
            kind, started, predicted = self._mark
            measured = (time.perf_counter() - started) / predicted
            self.round_ratio[kind] = 0.5 * self.round_ratio[kind] + 0.5 * measured
            self._mark = None

    def verify_lengths(self, survival: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        lengths = torch.zeros(survival.shape[0], dtype=torch.int64)
        if bool(active.any()) and survival.shape[1]:
            rows = survival[active].to(torch.float64).cpu()
            lengths[active] = self._lengths(rows)
            self.expected_survival = rows.mean(0)
        if self._draft_started is not None:
            started, depth = self._draft_started
            per_token = (time.perf_counter() - started) / depth
            self.draft_seconds_per_token = per_token if not self.draft_seconds_per_token else (
                0.5 * self.draft_seconds_per_token + 0.5 * per_token
            )
            self._draft_started = None
        self._start_round("drafted", int(active.sum()) + int(lengths.sum()))
        return lengths.to(survival.device)

    def _lengths(self, survival: torch.Tensor) -> torch.Tensor:
        admitted = self._admitted(survival)
        return admitted.to(torch.int64).cumprod(dim=1).sum(dim=1)

    def _admitted(self, survival: torch.Tensor) -> torch.Tensor:
        """`[R, K]` bool: the candidates admitted, in order of descending survival, until Θ first drops."""
        rows = survival.shape[0]
        flat = survival.flatten()
        order = torch.sort(-flat, stable=True).indices
        tau = rows + flat[order].cumsum(0)
        sps = self.profile.sps_many(rows + torch.arange(len(flat) + 1))
        theta = torch.cat((torch.tensor([rows * sps[0]]), tau * sps[1 : len(tau) + 1]))
        drops = (theta[1:] <= theta[:-1]).nonzero()
        n_admit = int(drops[0]) if len(drops) else len(order)
        admitted = torch.zeros(len(flat), dtype=torch.bool)
        admitted[order[:n_admit]] = True
        return admitted.view(survival.shape)
