"""How many drafted tokens each sequence verifies per round: fixed, or load-aware (DSpark Algorithm 1).

Verification is nearly free while the target pass is memory-bound and stops being free once the
pass's positions make it compute-bound. `LoadAwareScheduler` profiles the target's verify passes
once (`VerifyProfile`: seconds by the number of sequences and the tokens each extends by). DSpark's
Algorithm 1 admits drafts one by one, by estimated prefix survival a_{r,j}, while the expected
tokens per second `tau * SPS(N)` (SPS(N): passes per second with N positions) rises, which fits an
engine whose pass costs its tokens. Jev's pass costs its rectangle (rows x the longest row;
`docs/benchmarks.md`), so the same rule runs over widths: each round every active row verifies w
drafts, w growing while the expected tokens per second rise. It reads only the
survival estimates, never the drafted tokens, and entry j of the estimate is computed before x_j
is drawn, so the decision to verify x_j never depends on x_j or later tokens (DSpark App. A).
"""

import collections
import functools
import itertools
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

    def draft_depth(self, active: torch.Tensor, draft_len: int) -> int:
        """How many tokens to draft this round for the `active [B]` sequences (0: a plain decoding
        step, the drafter does not run)."""

    def verify_lengths(self, survival: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        """`survival [B, K]`, `active [B]` -> `[B]` how many drafts (a prefix) each sequence verifies."""

    def record(self, n_verified: torch.Tensor, n_accepted: torch.Tensor) -> None:
        """After the accept rule: `[B]` drafts verified and accepted this round (for later rounds only)."""


class FixedLength:
    """Draft and verify `draft_len` tokens for every active sequence, whatever the load."""

    def draft_depth(self, active: torch.Tensor, draft_len: int) -> int:
        return draft_len

    def verify_lengths(self, survival: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        return torch.where(active, survival.shape[1], 0).to(torch.int64)

    def record(self, n_verified: torch.Tensor, n_accepted: torch.Tensor) -> None:
        """A fixed length learns nothing from outcomes."""


def _piecewise(x: torch.Tensor, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """`y(x)` linear between the points `(xs, ys)` (xs ascending), flat before the first, on the last
    segment's line past the last; proportional to x through a single point."""
    if len(xs) == 1:
        return ys[0] * x / xs[0]
    upper = torch.searchsorted(xs, x).clamp(1, len(xs) - 1)
    lo, hi = xs[upper - 1], xs[upper]
    y = ys[upper - 1] + (ys[upper] - ys[upper - 1]) * (x - lo) / (hi - lo)
    return torch.where(x <= xs[0], ys[0], y)


@dataclass(frozen=True)
class VerifyProfile:
    """Measured seconds of one cached target pass over `rows[i]` sequences that each extend by
    `widths[j]` tokens: `seconds[i][j]` (both axes ascending).

    A pass's cost depends on both, not on its positions alone: with `mixed` weights the products'
    form follows the number of sequences (fp16 and int4 cost a row each, bfloat16 a block of rows),
    and every row costs the longest row's width (the rectangle)."""

    rows: tuple[int, ...]
    widths: tuple[int, ...]
    seconds: tuple[tuple[float, ...], ...]

    def pass_seconds(self, rows: int, widths: torch.Tensor) -> torch.Tensor:
        """Predicted seconds (float64) of a pass of `rows` sequences, each `widths[k]` tokens wide: linear
        between measured widths and measured row counts, extrapolated on the last segment past them.
        Remembered per question: the scheduler asks the same few every round."""
        return torch.tensor(_pass_seconds(self, rows, tuple(widths.tolist())), dtype=torch.float64)

    @classmethod
    def by_positions(
        cls, tokens: Sequence[int], steps_per_second: Sequence[float], max_rows: int = 64, max_width: int = 9
    ) -> "VerifyProfile":
        """The profile of an engine whose pass costs what its positions (rows x width) cost, from passes
        per second measured at `tokens` positions (linear in pass time between them), on every row
        count and width up to `max_rows` and `max_width`."""
        seconds = 1.0 / torch.tensor(steps_per_second, dtype=torch.float64)
        points = torch.tensor(tokens, dtype=torch.float64)
        rows, widths = range(1, max_rows + 1), range(1, max_width + 1)
        grid = [_piecewise(torch.tensor([r * w for w in widths], dtype=torch.float64), points, seconds) for r in rows]
        return cls(tuple(rows), tuple(widths), tuple(tuple(row.tolist()) for row in grid))

    @classmethod
    @torch.inference_mode()
    def measure(
        cls,
        model: Model,
        rows: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
        context: int = 32,
        width: int = 5,
        repeats: int = 3,
        lock: AbstractContextManager | None = None,
    ) -> "VerifyProfile":
        """Time cached target passes over each of `rows` sequences, each extending by 1, 2, 4 and `width`
        tokens (those up to `width`).

        Each row first holds `context` cached positions. Neither token ids nor cached values change
        a pass's cost, so the cache is not prefilled: its zero positions are committed as they are.
        The median of `repeats` timings is kept; the cache is rolled back between them. Each timed
        pass runs under `lock` (the decider's compute lock), never beside another pass, and in
        inference mode, as a decision's text fields are written: under `no_grad` alone each pass
        paid about 2.5 ms more at one sequence (a probe, 2026-12-07), which would price drafting.
        """
        lock = lock or nullcontext()
        widths = tuple(sorted({w for w in (1, 2, 4, width) if w <= width}))
        seconds = []
        for count in rows:
            cache = model.new_cache(count, context + width)
            cache.advance(torch.full((count,), context, dtype=torch.int64, device=cache.lengths.device))
            measured = []
            for wide in widths:
                new = torch.zeros(count, wide, dtype=torch.int64, device=model.device)
                timings = []
                for _ in range(repeats):
                    with lock:
                        started = time.perf_counter()
                        model(new, cache=cache)
                        timings.append(time.perf_counter() - started)
                    cache.truncate(torch.full((count,), context))
                measured.append(statistics.median(timings))
            seconds.append(tuple(measured))
        return cls(rows=tuple(rows), widths=widths, seconds=tuple(seconds))


def _probe_loss(first: float, n: int, theta: list[float]) -> float:
    """Expected seconds a round drafting one token for `n` sequences loses against a plain round
    (Θ of each: `theta[1]`, `theta[0]`; `first`, the sequences' first-draft survival summed), with the
    sequences in step: a batch lasts as long as its slowest sequence, so the round advances it by a
    second token only where every sequence's draft holds. At one sequence: the round's time less what
    plain rounds take for its expected tokens."""
    plain_round = n / theta[0]
    return (n + first) / theta[1] - plain_round * (1.0 + (first / n) ** n)


@functools.lru_cache(maxsize=4096)
def _pass_seconds(profile: VerifyProfile, rows: int, widths: tuple[float, ...]) -> tuple[float, ...]:
    wanted = torch.tensor(widths, dtype=torch.float64)
    measured = torch.tensor(profile.seconds, dtype=torch.float64)
    grid = torch.tensor(profile.widths, dtype=torch.float64)
    by_rows = torch.stack([_piecewise(wanted, grid, row) for row in measured])
    counts = torch.tensor(profile.rows, dtype=torch.float64)
    at = torch.tensor([float(rows)], dtype=torch.float64)
    return tuple(float(_piecewise(at, counts, by_rows[:, k])[0]) for k in range(len(widths)))


def _fit_line(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """(a, b) of the least-squares line a + b·x through the points, with a and b each at least 0: a
    line falling with x is flat at the mean; one crossing 0 above x = 0, or a single x, goes through
    the origin."""
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread:
        slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
        if slope < 0:
            return mean_y, 0.0
        if mean_y >= slope * mean_x:
            return mean_y - slope * mean_x, slope
    return 0.0, sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)


class LoadAwareScheduler:
    """DSpark's hardware-aware verify scheduler (Algorithm 1, with the early break), for Jev's target
    pass, which costs its rectangle: a pass over B rows in which the longest verifies w drafts runs
    B x (1 + w) positions, inactive rows and the shorter rows' padding included. So every active row
    verifies the same width w, the one where Θ(w), the expected tokens per second with every row
    verifying w, first drops; a longer width for only some rows would cost as much and emit less.

    It also weighs what the profile cannot see: the drafter's own time by depth and number of
    sequences, and what a whole round (sampling filter, accept rule, bookkeeping) costs beyond the
    bare target pass. Each round it times itself: the drafter between `draft_depth` and
    `verify_lengths`, the target pass and the accept rule until `record`. A round verifying w
    drafts costs `ratio * pass + w * extra`: `ratio`, the machine's speed against its profile, from
    plain rounds; `extra`, the seconds each verified draft adds beyond that (the accept rule and
    the bookkeeping over it), from drafted ones. These and the drafting times are each the median of
    their last ROUNDS_KEPT measurements, so one slow round moves none of them. Those costs and the
    acceptance seen so far (`record`: of the drafts verified at position j, how many were accepted,
    against how many the drafter's survival estimates predicted, over about the last WINDOW drafts
    verified there, times the drafter's mean estimate over every draft made there, `_rate`; until a
    position is measured, MIN_OUTCOMES verifications in MIN_ROUNDS rounds,
    the drafter's estimates for the first, and for a later one the survival of the one before it,
    though only in rounds that would draft on the measured positions alone, once the first is
    measured) decide how deep the next round drafts, if at all; the first round, with nothing
    measured, is optimistic, a plain run is broken now and then by a one-token probe
    (PROBE_SHARE), and a drafting run by a plain round (PLAIN_EVERY) that keeps `ratio` current.
    A probe verifies its draft whatever the drafter claims for it. Until the first draft position
    is measured, every round drafts and verifies at least one token (where the drafter has
    run at that number of sequences before, or drafts on its own estimate): the shipped drafter's
    claims run low (greedy, less than half the rate that held), and a warm-up whose optimistic
    first round verified nothing on them left a fresh scheduler decoding plainly on those claims.
    All of it comes from past rounds, so no verify decision depends on the tokens it decides about.
    """

    # A position's rate counts as measured once it has been verified MIN_OUTCOMES times in at least
    # MIN_ROUNDS rounds: one round's drafts hold or fail together (its sequences are at one point of their
    # texts, such as a subject line's first token), so a single wide round measures nothing. The
    # benchmark's warm-up, opening with rounds that verified seven drafts for each of 32 sequences, once
    # measured positions 2 to 7 at 6% held, and at one sequence the scheduler then never verified a
    # second draft again, where three paid (2026-12-07, a probe).
    MIN_OUTCOMES = 8
    MIN_ROUNDS = 4
    # A measured position is verified only where it pays, so a rate measured low is never measured
    # again unless it is forgotten: once STALE_ROUNDS drafted rounds since it was last verified have
    # stopped just before it, its counts are dropped and the next rounds that draft verify and measure
    # it anew (MIN_OUTCOMES in MIN_ROUNDS rounds, one position at a time: deeper ones keep their rates).
    # Until then it counts as holding whenever the one before held, but only in rounds that draft
    # anyway (`draft_depth`): counted so in every round, it made bodies at 4 and 16 sequences draft
    # where nothing paid (verifying 0.30 and 0.36 drafts a round, 2026-12-07).
    STALE_ROUNDS = 64
    # Each draft verified at position j weighs 1 - 1 / WINDOW as much per later draft verified there.
    # Per draft, not per round: at one sequence a round verifies one draft, and measured over the
    # last ten rounds (a fade of 0.9 a round, before 2026-12-05) a first draft that holds 37% of the
    # time read as little as 11% after a few misses in a row (`tests/test_spec_scheduler.py`), below
    # what a drafted round needs to pay; the scheduler then decoded plainly until a probe drafted.
    WINDOW = 32
    # Round costs are the medians of the last ROUNDS_KEPT measurements of their kind. On the shared
    # 2-core machine a round's time swings by a third from one round to the next; a running mean
    # that weighed the last round half (before 2026-12-05) followed the swings into the decisions.
    ROUNDS_KEPT = 16
    # After PLAIN_EVERY drafted rounds in a row at one number of sequences, the next is plain: `ratio`
    # comes from plain rounds only (a drafted round's time is `ratio` and `extra` at once), and a
    # scheduler that kept drafting would never see the machine speed up or slow down.
    PLAIN_EVERY = 16
    # Once the plain rounds since the drafter last ran took 1 / PROBE_SHARE times what a round drafting
    # one token is expected to lose against a plain one (its drafting and wider pass, less the tokens
    # its draft is expected to add to the batch's slowest sequence, `_probe_loss`), it runs once, one
    # token deep: acceptance is learned only from rounds that draft, and a drafter's chances change
    # with the text (the lookup drafter's copies). Such probes cost at most about PROBE_SHARE of plain
    # decoding's time, and come most often where drafting is expected to almost pay: there an
    # estimate a little low costs the most rounds, and a probe the least. (Priced at the drafting
    # alone, before 2026-12-05, a rate carried from other traffic just under break-even kept four
    # sequences plain for about 30 rounds. Crediting every sequence's expected tokens, before
    # 2026-12-07, priced a probe of four body continuations at 4 ms where it lost 14: a probe every
    # fifth round, and the scheduler 1.07x plain decoding's time, `docs/benchmarks.md`.)
    PROBE_SHARE = 0.02

    def __init__(self, profile: VerifyProfile) -> None:
        self.profile = profile
        # Seconds of drafting d tokens for B sequences: draft_seconds[B][d], the median of the last
        # ROUNDS_KEPT measured (draft_times[B][d]).
        self.draft_seconds: dict[int, dict[int, float]] = {}
        self.draft_times: dict[int, dict[int, collections.deque[float]]] = {}
        # By number of sequences: a plain round's measured time over its profiled pass (`ratio`; 1
        # until measured), and a drafted round's seconds beyond `ratio` times its pass per draft it
        # verified (`extra`; 0 until measured), the last ROUNDS_KEPT of each.
        self.ratios: dict[int, collections.deque[float]] = {}
        self.extras: dict[int, collections.deque[float]] = {}
        self.drafted_in_a_row: dict[int, int] = {}
        # Expected seconds of the plain rounds since the drafter last ran.
        self.plain_seconds = 0.0
        # The drafter's mean claim for its first draft in the last round that drafted (None before).
        self.first_claim: float | None = None
        # Per draft position j: how often it was verified, accepted, and the drafter's survival
        # estimates summed over those verifications (what it predicted would be accepted). Plain
        # floats, as is all of a round's arithmetic here: a handful of numbers per position.
        self.verified_at: list[float] = []
        self.accepted_at: list[float] = []
        self.estimated_at: list[float] = []
        # Per draft position j: how many rows drafted it and the drafter's survival estimates summed
        # over all of them, verified or not (faded as the counts above, per row drafted).
        self.drafted_at: list[float] = []
        self.claimed_at: list[float] = []
        # Per draft position: how many rounds verified it (unfaded), and how many drafted rounds have
        # stopped just before it since it was last verified.
        self.rounds_at: list[int] = []
        self.stale_at: list[int] = []
        self._mark: tuple[int, int, float, float] | None = None
        self._draft_started: tuple[float, int, int] | None = None
        self._probing = False

    def draft_depth(self, active: torch.Tensor, draft_len: int) -> int:
        """How many tokens to draft this round: the width of the highest expected tokens per second,
        drafting time and measured round overheads included, from the survival seen so far (all
        ones before any round); 0 when a plain step is expected to do better."""
        self._mark = None
        self._draft_started = None
        self._probing = False
        rows, n_active = len(active), int(active.sum())
        if n_active == 0 or draft_len == 0:
            return 0
        first_known = self._measured(0)
        # Once the first draft is measured, a later position not yet measured (or forgotten, `_age`)
        # is counted as holding only in rounds that draft on the measured ones: re-measuring it
        # costs those rounds a little width, where a round drafting for it alone costs a drafting.
        sums, theta, depth = self._best_depth(draft_len, n_active, rows, optimistic=not first_known)
        if depth and first_known:
            sums, theta, depth = self._best_depth(draft_len, n_active, rows, optimistic=True)
        if (
            depth == 0
            and self.draft_seconds.get(rows)  # a drafter never run at B is never probed
            and (not first_known or self.plain_seconds * self.PROBE_SHARE > _probe_loss(sums[0], n_active, theta))
        ):
            depth, self._probing = 1, True
        self._probing |= depth > 0 and not first_known
        if depth and self.drafted_in_a_row.get(rows, 0) >= self.PLAIN_EVERY:
            depth, self._probing = 0, False
        self.drafted_in_a_row[rows] = self.drafted_in_a_row.get(rows, 0) + 1 if depth else 0
        if depth:
            self.plain_seconds = 0.0
            self._draft_started = (time.perf_counter(), rows, depth)
        else:
            self.plain_seconds += n_active / theta[0]
            self._start_round(rows, 0)
        return depth

    def _best_depth(
        self, draft_len: int, n_active: int, rows: int, optimistic: bool
    ) -> tuple[list[float], list[float], int]:
        """The expected survival sums of `n_active` sequences up to `draft_len` (`_expected_survival`),
        Θ of drafting each depth in a pass of `rows` rows, and the depth of the highest Θ."""
        sums = [n_active * s for s in self._expected_survival(draft_len, optimistic)]
        theta = self._throughput(sums, n_active, rows, drafted=False)
        return sums, theta, max(range(len(theta)), key=theta.__getitem__)

    def verify_lengths(self, survival: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        """Every active row verifies the width at Θ's first drop, on the drafter's survival estimates
        as calibrated by past rounds (`_calibrated_sums`), the round's drafting counted in every
        width's time (`_throughput`). Θ(w) reads survival up to column w only,
        whose entries come before the drafts they decide about, so stopping at the first drop never
        lets draft j's own value (through a later survival entry) decide whether j is verified."""
        width = 0
        if bool(active.any()) and survival.shape[1]:
            rows = survival[active].to(torch.float64).cpu()
            n = rows.shape[0]
            claimed = rows.sum(0).tolist()
            self._count_claims(claimed, n)
            theta = self._throughput(self._calibrated_sums(rows, claimed), n, len(active), drafted=True)
            width = next((w for w in range(len(theta) - 1) if theta[w + 1] <= theta[w]), len(claimed))
            if self._probing:  # a probe verifies its draft: one that verified nothing would learn nothing
                width = max(width, 1)
            self.first_claim = claimed[0] / n
            self._grow(width)
            self._forget(width, n)
            for j in range(width):
                self.estimated_at[j] += claimed[j]
        if self._draft_started is not None:
            started, rows_drafted, depth = self._draft_started
            seconds = time.perf_counter() - started
            kept = self._kept(self.draft_times.setdefault(rows_drafted, {}), depth)
            kept.append(seconds)
            self.draft_seconds.setdefault(rows_drafted, {})[depth] = statistics.median(kept)
            self._draft_started = None
        self._start_round(len(active), width)
        return torch.where(active, width, 0).to(device=survival.device, dtype=torch.int64)

    def record(self, n_verified: torch.Tensor, n_accepted: torch.Tensor) -> None:
        """Close the round's timing; count, per draft position, how often it was verified and accepted."""
        self._finish_round()
        verified, accepted = n_verified.tolist(), n_accepted.tolist()
        width = max(verified, default=0)
        self._grow(width)
        for j in range(width):
            self.verified_at[j] += sum(v > j for v in verified)
            self.accepted_at[j] += sum(a > j for a in accepted)
            self.rounds_at[j] += 1
            self.stale_at[j] = 0
        self._age(width)

    def _count_claims(self, claimed: list[float], rows: int) -> None:
        """Count the drafter's survival estimates summed over `rows` rows (`claimed`, one per position
        drafted), after fading the counts so far by (1 - 1 / WINDOW)^rows as `_forget` does."""
        self._grow(len(claimed))
        fade = self._fade(rows)
        for j, claim in enumerate(claimed):
            self.drafted_at[j] = fade * self.drafted_at[j] + rows
            self.claimed_at[j] = fade * self.claimed_at[j] + claim

    def _age(self, width: int) -> None:
        """After a drafted round that verified `width` drafts, the measured position after them ages
        by a round; at STALE_ROUNDS its counts are dropped (see STALE_ROUNDS)."""
        if width == 0 or not self._measured(width):
            return
        self.stale_at[width] += 1
        if self.stale_at[width] >= self.STALE_ROUNDS:
            for counts in (self.verified_at, self.accepted_at, self.estimated_at):
                counts[width] = 0.0
            self.rounds_at[width] = self.stale_at[width] = 0

    def _forget(self, width: int, rows: int) -> None:
        """Before a round in which `rows` sequences verify `width` drafts each is counted, the counts
        of positions 1..width so far weigh (1 - 1 / WINDOW)^rows as much: acceptance at a position is
        measured over about its last WINDOW verified drafts, so it follows the texts now being
        written (a service's traffic, a batch of other prompts) instead of all it has seen. A position
        no round verifies keeps its counts, and with them its measured rate, until STALE_ROUNDS
        drafted rounds stopping just before it drop them (`_age`); and a count that has reached
        MIN_OUTCOMES stays there (it fades by less than the round adds)."""
        fade = self._fade(rows)
        for counts in (self.verified_at, self.accepted_at, self.estimated_at):
            counts[:width] = [fade * c for c in counts[:width]]

    def _fade(self, rows: int) -> float:
        """What a count weighs after a round adds `rows` drafts at its position (see WINDOW)."""
        return (1.0 - 1.0 / self.WINDOW) ** rows

    def _grow(self, width: int) -> None:
        """Room in the per-position counts for `width` positions."""
        for counts in (self.verified_at, self.accepted_at, self.estimated_at, self.drafted_at, self.claimed_at):
            counts += [0.0] * (width - len(counts))
        for rounds in (self.rounds_at, self.stale_at):
            rounds += [0] * (width - len(rounds))

    def _measured(self, j: int) -> bool:
        """Whether draft position j has been verified MIN_OUTCOMES times in at least MIN_ROUNDS rounds
        (its rate is measured)."""
        return (
            j < len(self.verified_at)
            and self.verified_at[j] >= self.MIN_OUTCOMES
            and self.rounds_at[j] >= self.MIN_ROUNDS
        )

    def _factors(self, depth: int) -> list[float]:
        """Per position up to `depth`: how many drafts were accepted there against how many the
        drafter's estimates predicted, where it is measured (`_measured`); else 1."""
        return [self._factor(j) for j in range(depth)]

    def _factor(self, j: int) -> float:
        """Drafts accepted at position j against the drafter's estimates for them, where it is
        measured (`_measured`) and they claimed anything; else 1."""
        if self._measured(j) and self.estimated_at[j] > 0:
            return self.accepted_at[j] / self.estimated_at[j]
        return 1.0

    def _rate(self, j: int) -> float:
        """P(drafts 1..j + 1 accepted) at measured position j: its factor (`_factors`) times the
        drafter's mean claim there over every row that drafted it, verified or not. Accepted over
        verified alone reads the rate on the drafts the verify cut chose, which it chooses where the
        drafter claims much: body continuations at 16 sequences read 0.39, 0.43 and 0.41 through one,
        two and three drafts, where k = 3's rounds held 0.37, 0.19 and 0.12 (2026-12-07). Accepted
        over verified where no claims are counted."""
        if j < len(self.drafted_at) and self.drafted_at[j] > 0 and self.estimated_at[j] > 0:
            return min(1.0, self._factor(j) * self.claimed_at[j] / self.drafted_at[j])
        return self.accepted_at[j] / max(self.verified_at[j], 1e-12)

    def _calibrated_sums(self, survival: torch.Tensor, claimed: list[float]) -> list[float]:
        """Column sums of `survival [n, K]` (`claimed`) scaled per position by `_factors` where they
        are above 1, each entry at most 1: a drafter that claims 0.2 where 0.6 holds is read at 0.6.
        A factor below 1 is read as 1: the round's depth was priced on it already (`_rate`), and
        scaling this round's claims down by it as well cut rounds short of the depth that paid (the
        scheduler drafted four tokens and verified one or two, 2026-12-07)."""
        factors = [max(f, 1.0) for f in self._factors(len(claimed))]
        if factors == [1.0] * len(factors):
            sums = claimed
        else:
            scaled = survival * torch.tensor(factors, dtype=torch.float64)
            sums = scaled.clamp(max=1.0).sum(0).tolist()
        return self._optimistic(sums)

    def _optimistic(self, survival: list[float]) -> list[float]:
        """`survival` with every position after the first that is not yet measured assumed to hold
        whenever the one before it held. On the drafter's own claims for them, a position never
        verified was never measured: at one sequence the scheduler verified about one draft a round
        on body continuations where three paid more (2026-12-06, `docs/benchmarks.md`). So each
        later position is verified where it would pay at the rate of the one before, until
        MIN_OUTCOMES verifications in MIN_ROUNDS rounds measure it."""
        out = list(survival)
        for j in range(1, len(out)):
            if not self._measured(j):
                out[j] = out[j - 1]
        return out

    def _expected_survival(self, depth: int, optimistic: bool = True) -> list[float]:
        """`[depth]` P(drafts 1..j accepted): observed where a position is measured (`_measured`); the
        first, before that, the drafter's last claim for it (1 before any); a later one, before
        that, the one before it (`_optimistic`), or, not `optimistic`, 0 from there on (what the
        measured positions alone promise)."""
        estimate = [1.0] * depth
        if depth and self.first_claim is not None:
            estimate[0] = self.first_claim
        for j in range(min(depth, len(self.verified_at))):
            if self._measured(j):
                estimate[j] = self._rate(j)
        if optimistic:
            return self._optimistic(estimate)
        unmeasured = next((j for j in range(1, depth) if not self._measured(j)), depth)
        return estimate[:unmeasured] + [0.0] * (depth - unmeasured)

    def _throughput(self, survival_sums: list[float], n: int, rows: int, drafted: bool) -> list[float]:
        """`[K + 1]` Θ(w): expected tokens per second of a round in which each of `n` rows verifies w
        drafts (`survival_sums[j]`: the rows' survival at draft j + 1, summed), in a pass of `rows`
        rows. Not `drafted`: the round is yet to draft, so w drafts cost their drafting time and w = 0
        is a plain round. `drafted`: the K drafts are made, and every width's round has paid for
        them. Left out of the verify cut, as before 2026-12-08, that spent time made each further
        draft's pass look dearer against the round than it was, and the cut stopped short."""
        k = len(survival_sums)
        tokens = list(itertools.accumulate(survival_sums, initial=float(n)))
        ratio, extra = self._ratio(rows), self._extra(rows)
        passes = _pass_seconds(self.profile, rows, tuple(float(1 + w) for w in range(k + 1)))
        rounds = [ratio * p + w * extra for w, p in enumerate(passes)]
        drafting_seconds = self._drafting_seconds(k, rows)
        if drafted:
            drafting_seconds = [drafting_seconds[k]] * (k + 1)
        return [t / (r + d) for t, r, d in zip(tokens, rounds, drafting_seconds, strict=True)]

    def _drafting_seconds(self, k: int, rows: int) -> list[float]:
        """`[K + 1]` the expected seconds of drafting d = 0..K tokens for `rows` sequences, on the line
        a + b·d (neither below 0) fitted by least squares to the measured depths' times; one depth
        measured, the line through it and 0. Nothing measured for `rows`: 0, so its first round
        drafts (a drafter's pass costs more the more sequences it reads). A line, not the measured
        times themselves: they are medians of few, noisy rounds (a body at one sequence read 3.1,
        3.6, 5.1, 5.0 and 6.4 ms at depths 1, 2, 3, 5 and 7, 2026-12-07), and taken as they were
        they priced depth 3 above what it measured and the scheduler drafted shallower than paid."""
        measured = self.draft_seconds.get(rows)
        if not measured:
            return [0.0] * (k + 1)
        base, slope = _fit_line(list(measured), list(measured.values()))
        return [0.0] + [base + slope * d for d in range(1, k + 1)]

    def _kept(self, store: dict[int, collections.deque[float]], key: int) -> collections.deque[float]:
        """The last ROUNDS_KEPT measurements of one kind under `key`, made empty if none yet."""
        return store.setdefault(key, collections.deque(maxlen=self.ROUNDS_KEPT))

    def _ratio(self, rows: int) -> float:
        """A plain round's time over its profiled pass at `rows` sequences: the median measured, else 1."""
        kept = self.ratios.get(rows)
        return statistics.median(kept) if kept else 1.0

    def _extra(self, rows: int) -> float:
        """The seconds each verified draft adds to a round beyond `ratio` times its pass: the median
        measured (none below 0: a drafted round measured faster than that means `ratio` is behind),
        else 0. Per draft: the first, optimistic round verifies every draft it can, and its cost,
        charged whole to a round of one draft, kept drafting off at four sequences (2026-12-05)."""
        kept = self.extras.get(rows)
        return max(statistics.median(kept), 0.0) if kept else 0.0

    def _start_round(self, rows: int, width: int) -> None:
        """A round of `rows` sequences verifying `width` drafts each begins: its pass is predicted now."""
        predicted = _pass_seconds(self.profile, rows, (float(1 + width),))[0]
        self._mark = (rows, width, time.perf_counter(), predicted)

    def _finish_round(self) -> None:
        """Keep the last round's measured time: as `ratio` if it was plain, as `extra` if it verified drafts."""
        if self._mark is not None:
            rows, width, started, predicted = self._mark
            seconds = time.perf_counter() - started
            if width:
                self._kept(self.extras, rows).append((seconds - self._ratio(rows) * predicted) / width)
            else:
                self._kept(self.ratios, rows).append(seconds / predicted)
            self._mark = None
