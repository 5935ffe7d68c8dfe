"""`generate`: batched text generation from the target model, plain or speculative.

Plain decoding is the speculative round with zero drafts, so the two share every line that turns
logits into tokens. One round, for all active sequences at once:

1. the policy picks a draft depth K from which sequences are active (0: no drafter pass at all);
2. the drafter proposes K tokens per sequence with their q and survival estimates;
3. the policy picks how many (a prefix) each sequence verifies, reading survival only;
4. ONE target pass reads each sequence's `[pending, x_1..x_n]` (ragged lengths) into the cache;
5. `accept_block` draws how many drafts held and the correction / bonus token (a greedy batch
   reads them off the argmaxes: `greedy_verdict`);
6. the target cache is rolled back past rejected drafts (`LatentCache.truncate`), the drafter
   is told what was committed (and, if it reads the target's states, shown the target's hidden
   states at the committed positions), and the emitted tokens are appended (cut at a stop token
   or at `max_new_tokens`);
7. once at most half the batch is still active, the active sequences go on alone (`shrink`).

The target's cache always holds the prompt and the emitted tokens except the newest ("pending")
one, which the next round's pass reads first. A drafter that reads the target's hidden states
(`ReadsTargetStates`) gets them from the prefill and from every verify pass; a round in which some
active sequence has no state yet (a given `TargetState` without them, or a one-token prompt)
drafts nothing: it is a plain decoding step, whose pass supplies the states for the next round.

Where each sequence stands is one `TargetState`: the cache, the pending tokens, and the hidden states
known so far. `generate` prefills one from the prompts, or continues one it is given (a decision's
text fields continue the decision pass's cache).
"""

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import torch

from jev.generate.accept import SamplingSettings, accept_block, greedy_verdict, warp
from jev.generate.drafters.protocol import Draft, Drafter, ReadsTargetStates
from jev.generate.repeats import repeat_mask
from jev.generate.scheduler import FixedLength, VerifyPolicy
from jev.model import LatentCache, Model
from jev.ragged import pad_rows, rows_of


class Randomness:
    """Uniform draws in [0, 1): one generator for the whole batch (`seed` an int or None), or one per
    sequence (`seed` a list), which makes a sequence's output independent of its batch neighbours."""

    def __init__(self, seed: int | Sequence[int] | None, batch: int) -> None:
        if seed is None or isinstance(seed, int):
            generator = torch.Generator()
            if seed is None:
                generator.seed()
            else:
                generator.manual_seed(seed)
            self.generators = [generator]
        else:
            if len(seed) != batch:
                raise ValueError(f"seed needs one value per sequence ({batch}), got {len(seed)}")
            self.generators = [torch.Generator().manual_seed(int(s)) for s in seed]
        self.batch = batch

    def keep(self, rows: torch.Tensor) -> None:
        """Draw for these sequences alone from now on; each keeps its own generator, if it has one."""
        if len(self.generators) > 1:
            self.generators = [self.generators[row] for row in rows.tolist()]
        self.batch = len(rows)

    def uniform(self, n: int) -> torch.Tensor:
        """`[B, n]` float64 uniforms."""
        if len(self.generators) == 1:
            return torch.rand(self.batch, n, generator=self.generators[0], dtype=torch.float64)
        return torch.stack([torch.rand(n, generator=g, dtype=torch.float64) for g in self.generators])


@dataclass
class GenerationStats:
    """Counters of one `generate` call.

    rounds: sequence-rounds (one per active sequence per target pass). Per draft position j + 1:
    verified_at[j], how often it was verified; reached_at[j], how often it was verified with every
    draft before it accepted; accepted_at[j], how often it was accepted (and so every draft before
    it). Accepted lengths count the bonus or correction token: `mean_accepted_length = (accepted +
    rounds) / rounds`.
    """

    target_passes: int = 0
    drafter_passes: int = 0
    rounds: int = 0
    drafted: int = 0
    verified: int = 0
    accepted: int = 0
    bonus: int = 0
    verified_at: list[int] = field(default_factory=list)
    reached_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens emitted per sequence per target pass, bonus/correction included (before stop cuts)."""
        return (self.accepted + self.rounds) / self.rounds if self.rounds else 0.0

    @property
    def survival(self) -> list[float]:
        """P(drafts 1..j all accepted | j verified), per draft position: at a fixed draft length these
        sum to the drafts accepted per round."""
        return _ratios(self.accepted_at, self.verified_at)

    @property
    def conditional_acceptance(self) -> list[float]:
        """P(draft j accepted | j verified and drafts 1..j-1 accepted), per draft position."""
        return _ratios(self.accepted_at, self.reached_at)

    def count_positions(self, n_verified: torch.Tensor, n_accepted: torch.Tensor, width: int) -> None:
        grow = max(width - len(self.verified_at), 0)
        for counts in (self.verified_at, self.reached_at, self.accepted_at):
            counts += [0] * grow
        positions = torch.arange(width).view(1, -1)
        verified = positions < n_verified.view(-1, 1)
        counted = (verified, verified & (positions <= n_accepted.view(-1, 1)), positions < n_accepted.view(-1, 1))
        for counts, hits in zip((self.verified_at, self.reached_at, self.accepted_at), counted, strict=True):
            for j, n in enumerate(hits.sum(0).tolist()):
                counts[j] += n


def _ratios(hits: list[int], trials: list[int]) -> list[float]:
    """hits / trials per position, NaN where there were no trials."""
    return [h / t if t else float("nan") for h, t in zip(hits, trials, strict=True)]


@dataclass
class TargetState:
    """Each sequence's place in the target. `cache` holds every token but the pending one,
    `pending [B]`; `states [B, T, D]` are the target's final hidden states at the last `counts[b]`
    cached positions of sequence b (in the first `counts[b]` columns; 0 where none is known: a
    drafter that reads target states drafts only from a known one)."""

    cache: LatentCache
    pending: torch.Tensor
    states: torch.Tensor
    counts: torch.Tensor

    @classmethod
    def prefill(cls, model: Model, prompts: list[list[int]], room: int) -> "TargetState":
        """Read every prompt but its last token, in one pass, into a new cache of `room` positions
        (no pass runs when every prompt is one token long: then no state is known)."""
        cache = model.new_cache(len(prompts), room)
        tokens, lengths = pad_rows([prompt[:-1] for prompt in prompts])
        states = torch.zeros(len(prompts), 0, model.config.hidden_size, dtype=model.dtype, device=model.device)
        if tokens.shape[1] > 0:
            states = model.hidden_states(tokens.to(model.device), cache=cache, lengths=lengths)
        return cls(cache, _last_tokens(prompts), states, lengths)

    @classmethod
    def cached(
        cls,
        model: Model,
        cache: LatentCache,
        prompts: list[list[int]],
        states: torch.Tensor | None = None,
        counts: torch.Tensor | None = None,
    ) -> "TargetState":
        """`cache` already holds every prompt but its last token; `states [B, T, D]`, if known, are the
        target's states at the last `counts [B]` of them (the pass that read them)."""
        expected = torch.tensor([len(p) - 1 for p in prompts], device=cache.lengths.device)
        if cache.batch_size != len(prompts) or not torch.equal(cache.lengths, expected):
            raise ValueError(f"the cache holds {cache.lengths.tolist()} tokens; the prompts need {expected.tolist()}")
        if (states is None) != (counts is None):
            raise ValueError("give the states with their counts, or neither")
        if states is None or counts is None:
            states = torch.zeros(len(prompts), 0, model.config.hidden_size, dtype=model.dtype, device=model.device)
            counts = torch.zeros(len(prompts), dtype=torch.int64)
        counts = counts.to("cpu", torch.int64)
        if bool((counts > expected.cpu()).any()) or bool((counts > states.shape[1]).any()):
            raise ValueError(f"states for {counts.tolist()} positions; the cache holds {expected.tolist()}")
        return cls(cache, _last_tokens(prompts), states, counts)

    def followers(self, prompts: list[list[int]]) -> torch.Tensor:
        """`[B, T]`: the token after each position `states` covers (the prompt's last `counts[b]` tokens)."""
        rows = [prompt[len(prompt) - n :] if n else [] for prompt, n in zip(prompts, self.counts.tolist(), strict=True)]
        tokens = torch.zeros(len(prompts), self.states.shape[1], dtype=torch.int64)
        padded, _ = pad_rows(rows)
        tokens[:, : padded.shape[1]] = padded
        return tokens


def _last_tokens(prompts: list[list[int]]) -> torch.Tensor:
    return torch.tensor([p[-1] for p in prompts])


@dataclass
class Generation:
    """What `generate` returns: `tokens[b]` the new tokens of sequence b, the counters, and the
    target's cache holding each prompt plus all its new tokens but the last."""

    tokens: list[list[int]]
    stats: GenerationStats
    cache: LatentCache


@torch.no_grad()
def generate(
    model: Model,
    prompt_ids: Sequence[int] | Sequence[Sequence[int]],
    max_new_tokens: int | Sequence[int],
    temperature: float | Sequence[float] = 1.0,
    top_p: float | Sequence[float] = 1.0,
    top_k: int | Sequence[int] = 0,
    seed: int | Sequence[int] | None = None,
    drafter: Drafter | None = None,
    draft_len: int = 4,
    stop: Collection[int] = (),
    policy: VerifyPolicy | None = None,
    state: TargetState | None = None,
    no_repeat_ngram: int = 0,
    shrink: bool = True,
) -> Generation:
    """Generate up to `max_new_tokens` per prompt; `drafter=None` is plain decoding.

    `prompt_ids` is one prompt (list of ids) or a list of prompts of any lengths. Sampling settings
    and `max_new_tokens` are scalars or one value per prompt; temperature 0 is greedy. `stop`
    tokens end a sequence and are kept as its last token. `policy` picks draft and verify lengths
    (default: always `draft_len`). The output has exactly the distribution of plain decoding.

    `state`, when given, is where the prompts already stand in the target (`TargetState.cached`),
    so no prefill pass runs; its cache needs room for the new tokens plus `draft_len + 1`. A drafter
    that reads target states drafts from the first round where the state's hidden states are
    known, else from the second, after the first round's pass.

    `no_repeat_ngram = n > 0` bans every token that would write an n-gram of the generated text a
    second time (`jev.generate.repeats`); the distribution kept exactly is plain decoding's under
    the same ban.

    `shrink`: once at most half the batch is still active, the active sequences go on alone (their
    cache rows copied out, and back at the end), so the finished ones stop costing every pass a row.
    A sequence's tokens keep exactly their distribution; its products may round differently in a
    smaller batch, as in any other batch size.
    """
    prompts = _as_batch(prompt_ids)
    batch = len(prompts)
    settings = SamplingSettings.build(batch, temperature, top_k, top_p)
    budget = torch.as_tensor(
        [max_new_tokens] * batch if isinstance(max_new_tokens, int) else list(max_new_tokens), dtype=torch.int64
    )
    if budget.shape != (batch,) or bool((budget < 0).any()):
        raise ValueError(f"max_new_tokens must be >= 0, one value or one per prompt; got {max_new_tokens}")
    if no_repeat_ngram < 0:
        raise ValueError(f"no_repeat_ngram must be >= 0 (0 = off), got {no_repeat_ngram}")
    depth_cap = draft_len if drafter is not None else 0
    policy = policy or FixedLength()
    stop_ids = torch.tensor(sorted(stop), dtype=torch.int64)
    rng = Randomness(seed, batch)
    stats = GenerationStats()
    max_len = max(len(p) for p in prompts) + int(budget.max()) + depth_cap + 1
    reads_states = isinstance(drafter, ReadsTargetStates)
    if state is None:
        state = TargetState.prefill(model, prompts, max_len)
        stats.target_passes += int(bool((state.counts > 0).any()))
    elif state.cache.max_len < max_len:
        raise ValueError(f"the cache holds {state.cache.max_len} positions; this generation needs {max_len}")
    cache, pending, seen = state.cache, state.pending, state.counts > 0
    if drafter is not None:
        passes_before = drafter.passes  # a drafter counts its passes over its lifetime
        drafter.start(prompts, max_len)
        if reads_states and bool(seen.any()):
            drafter.observe(state.states, state.followers(prompts), state.counts)
    out = torch.zeros(batch, int(budget.max()) + depth_cap + 1, dtype=torch.int64)
    out_n = torch.zeros(batch, dtype=torch.int64)
    active = budget > 0
    home, rows = cache, torch.arange(batch)  # rows: each sequence's place in `prompts`
    results: list[list[int]] = [[] for _ in range(batch)]

    while bool(active.any()):
        k = policy.draft_depth(active, depth_cap)
        if reads_states and not bool(seen[active].all()):
            k = 0
        started = time.perf_counter()
        if k:
            draft = drafter.propose(pending, active, settings, rng.uniform(k))
            n_verified = torch.where(active, policy.verify_lengths(draft.survival, active), 0).clamp(max=k)
            stats.drafted += int(active.sum()) * k
        else:
            draft = Draft.none(len(rows), model.config.vocab_size, model.dtype)
            n_verified = torch.zeros(len(rows), dtype=torch.int64)
        drafted, q = draft.tokens, draft.probs
        verify_started = time.perf_counter()
        stats.draft_seconds += verify_started - started

        width = int(n_verified.max()) if k else 0
        drafted, q = drafted[:, :width], None if q is None else q[:, :width]
        before = cache.lengths.clone()
        lengths = torch.where(active, 1 + n_verified, 0)
        hidden = model.hidden_states(
            torch.cat((pending.view(-1, 1), drafted), dim=1).to(model.device), cache=cache, lengths=lengths
        )
        logits = model.lm_head(hidden)
        if no_repeat_ngram:
            banned = repeat_mask(out, out_n, drafted, no_repeat_ngram, logits.shape[-1])
            logits = logits.masked_fill(banned.to(logits.device), float("-inf"))
        uniforms = rng.uniform(1)[:, 0]  # drawn whatever the settings, so a seed's later draws stay put
        if bool(settings.greedy.all()):
            verdict = greedy_verdict(logits, drafted.to(logits.device), n_verified.to(logits.device))
        else:
            p = warp(logits, settings)
            verdict = accept_block(p, q.to(p.dtype), drafted, n_verified, uniforms)
        stats.verify_seconds += time.perf_counter() - verify_started

        n_accepted = torch.where(active, verdict.n_accepted, 0)
        policy.record(n_verified, n_accepted)
        cache.truncate(torch.where(active, before + 1 + n_accepted, before))
        committed = torch.cat((pending.view(-1, 1), drafted), dim=1)
        counts = torch.where(active, 1 + n_accepted, 0)
        emitted = torch.cat((drafted, drafted.new_zeros(len(rows), 1)), dim=1)
        emitted = emitted.scatter(1, n_accepted.view(-1, 1), verdict.next_token.view(-1, 1))
        if drafter is not None:
            drafter.commit(committed, counts)
            if reads_states:
                drafter.observe(hidden, emitted, counts)
                seen |= active
        _count(stats, active, n_verified, n_accepted, verdict.bonus, width)
        active = _append(out, out_n, emitted, counts, budget, stop_ids, active)
        pending = verdict.next_token
        if shrink and 0 < 2 * int(active.sum()) <= len(active):
            left, kept = (~active).nonzero().view(-1), active.nonzero().view(-1)
            _finish(results, rows[left], out[left], out_n[left])
            if cache is not home:
                home.put(rows[left], cache, left)
            cache = cache.select(kept)
            rows, budget, out, out_n, active, seen, pending = (
                t[kept.to(t.device)] for t in (rows, budget, out, out_n, active, seen, pending)
            )
            settings = settings.select(kept)
            rng.keep(kept)
            if drafter is not None:
                drafter.keep(kept)
    _finish(results, rows, out, out_n)
    if cache is not home:
        home.put(rows, cache, torch.arange(len(rows)))
    if drafter is not None:
        stats.drafter_passes = drafter.passes - passes_before
    prompt_n, written = torch.tensor(list(map(len, prompts))), torch.tensor(list(map(len, results)))
    home.truncate(torch.minimum(home.lengths, (prompt_n + written - 1).clamp(min=0)))
    return Generation(tokens=results, stats=stats, cache=home)


def _finish(results: list[list[int]], rows: torch.Tensor, out: torch.Tensor, out_n: torch.Tensor) -> None:
    """Record the tokens `out[i, :out_n[i]]` of the sequences `rows[i]` in their places."""
    for row, tokens in zip(rows.tolist(), rows_of(out, out_n), strict=True):
        results[row] = tokens


def _as_batch(prompt_ids: Sequence[int] | Sequence[Sequence[int]]) -> list[list[int]]:
    if len(prompt_ids) and isinstance(prompt_ids[0], int):
        prompts = [list(prompt_ids)]
    else:
        prompts = [p if type(p) is list else list(p) for p in prompt_ids]
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    return prompts


def _count(
    stats: GenerationStats,
    active: torch.Tensor,
    n_verified: torch.Tensor,
    n_accepted: torch.Tensor,
    bonus: torch.Tensor,
    width: int,
) -> None:
    stats.target_passes += 1
    stats.rounds += int(active.sum())
    stats.verified += int(n_verified.sum())
    stats.accepted += int(n_accepted.sum())
    stats.bonus += int((bonus & active & (n_verified > 0)).sum())
    stats.count_positions(n_verified, n_accepted, width)


def _append(
    out: torch.Tensor,
    out_n: torch.Tensor,
    emitted: torch.Tensor,
    counts: torch.Tensor,
    budget: torch.Tensor,
    stop_ids: torch.Tensor,
    active: torch.Tensor,
) -> torch.Tensor:
    """Append `emitted[b, :counts[b]]` to `out` (in place), cut after a stop token and at the budget;
    return which sequences are still active."""
    columns = torch.arange(emitted.shape[1]).view(1, -1)
    real = columns < counts.view(-1, 1)
    is_stop = torch.isin(emitted, stop_ids) & real
    first_stop = torch.where(is_stop.any(1), is_stop.to(torch.int64).argmax(1) + 1, counts)
    counts = torch.minimum(torch.minimum(counts, first_stop), budget - out_n)
    write = columns < counts.view(-1, 1)
    rows, cols = write.nonzero(as_tuple=True)
    out[rows, out_n[rows] + cols] = emitted[rows, cols]
    out_n += counts
    return active & ~(is_stop & write).any(1) & (out_n < budget)
