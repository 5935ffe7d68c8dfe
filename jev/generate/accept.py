"""The sampling filter and the lossless accept rule: pure functions on probability tensors.

Plain decoding and speculative decoding both turn logits into the distribution they sample from
with `warp`, so the two agree exactly. The accept rule (Leviathan et al. 2023; Chen et al. 2023)
accepts drafted token j with probability `min(1, p_j(x_j) / q_j(x_j))`, draws the token after the
first rejection from `norm(max(0, p_j - q_j))`, and draws a bonus token from `p_{n+1}` when all
n verified drafts held. p is the target's distribution AFTER the request's temperature / top-k /
top-p; q is exactly the distribution each drafted token was sampled from.

`outcome_distribution` writes the rule down as the exact probability of each round outcome
(m drafts accepted, then token y), and `accept_block` samples one outcome of that law with one
uniform per sequence, by its inverse CDF, without building it whole. The exact tests enumerate
the law, and the sampler is tested to draw exactly its inverse CDF. Greedy requests
(temperature 0) get a one-hot p at the argmax, under which the rule accepts a draft iff it is the
argmax and emits the argmax otherwise, whatever q was: `greedy_verdict` is that outcome read off
the logits, without the vocabulary-wide distributions.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingSettings:
    """Per-sequence sampling settings, each a tensor `[B]`.

    temperature: 0 means greedy. top_k: 0 means no top-k. top_p: 1 means no nucleus filter.
    """

    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor

    @classmethod
    def build(
        cls,
        batch: int,
        temperature: float | Sequence[float] = 1.0,
        top_k: int | Sequence[int] = 0,
        top_p: float | Sequence[float] = 1.0,
    ) -> "SamplingSettings":
        """Broadcast a scalar, or check a per-sequence list, for each setting."""
        settings = cls(
            temperature=_per_sequence(temperature, batch, torch.float64, "temperature"),
            top_k=_per_sequence(top_k, batch, torch.int64, "top_k"),
            top_p=_per_sequence(top_p, batch, torch.float64, "top_p"),
        )
        if bool((settings.temperature < 0).any()):
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {settings.temperature.tolist()}")
        if bool((settings.top_k < 0).any()):
            raise ValueError(f"top_k must be >= 0 (0 = off), got {settings.top_k.tolist()}")
        if bool(((settings.top_p <= 0) | (settings.top_p > 1)).any()):
            raise ValueError(f"top_p must be in (0, 1], got {settings.top_p.tolist()}")
        return settings

    def select(self, rows: torch.Tensor) -> "SamplingSettings":
        """The settings of these sequences, in this order."""
        return SamplingSettings(self.temperature[rows], self.top_k[rows], self.top_p[rows])

    @property
    def greedy(self) -> torch.Tensor:
        """`[B]` bool: the sequences decoded greedily."""
        return self.temperature == 0


def _per_sequence(value: float | Sequence[float], batch: int, dtype: torch.dtype, name: str) -> torch.Tensor:
    if isinstance(value, int | float):
        return torch.full((batch,), value, dtype=dtype)
    out = torch.as_tensor(list(value), dtype=dtype)
    if out.shape != (batch,):
        raise ValueError(f"{name} needs one value per sequence ({batch}), got {len(out)}")
    return out


def warp(logits: torch.Tensor, settings: SamplingSettings) -> torch.Tensor:
    """The distribution a request samples from: `logits [B, ..., V]` -> probabilities `[B, ..., V]`.

    Order as in vLLM's `compute_probs`: temperature, then top-k (ties with the k-th value kept),
    then top-p on the tempered distribution (the smallest prefix, by descending probability, whose
    mass reaches top_p), then softmax over what is left. Greedy rows are one-hot at the argmax.
    Without a top-k or top-p row nothing is filtered, so the sort is skipped (greedy decoding
    would otherwise sort the whole vocabulary every step). The result has the dtype of `logits`;
    nothing is modified in place.
    """
    if bool(settings.greedy.all()):
        return _argmax_one_hot(logits)
    shape = (logits.shape[0],) + (1,) * (logits.dim() - 1)
    temperature = settings.temperature.to(logits.device, logits.dtype).view(shape)
    greedy = settings.greedy.to(logits.device).view(shape)
    scaled = logits / torch.where(greedy, torch.ones_like(temperature), temperature)
    if not bool((settings.top_k > 0).any() or (settings.top_p < 1).any()):  # nothing to filter: no sort
        return _with_greedy(logits, scaled.softmax(dim=-1), greedy)
    ordered, order = scaled.sort(dim=-1, descending=True)
    ranks = torch.arange(logits.shape[-1], device=logits.device)
    top_k_drop = None
    if bool((settings.top_k > 0).any()):  # without any top-k row, nothing is dropped: skip the ops
        top_k = settings.top_k.to(logits.device).view(shape)
        kth = (top_k - 1).clamp(min=0, max=logits.shape[-1] - 1).expand_as(ordered[..., :1])
        top_k_drop = (top_k > 0) & (ordered < ordered.gather(-1, kth))
        ordered = ordered.masked_fill(top_k_drop, float("-inf"))
    sorted_probs = ordered.softmax(dim=-1)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    top_p = settings.top_p.to(logits.device, logits.dtype).view(shape)
    drop = (mass_before >= top_p) & (ranks > 0)
    if top_k_drop is not None:
        drop = drop | top_k_drop
    keep = torch.zeros_like(drop).scatter(-1, order, ~drop)
    return _with_greedy(logits, scaled.masked_fill(~keep, float("-inf")).softmax(dim=-1), greedy)


def _with_greedy(logits: torch.Tensor, probs: torch.Tensor, greedy: torch.Tensor) -> torch.Tensor:
    """`probs` with the greedy rows (`greedy`, broadcastable to them) one-hot at their argmax."""
    if not bool(greedy.any()):
        return probs
    return torch.where(greedy, _argmax_one_hot(logits), probs)


def _argmax_one_hot(logits: torch.Tensor) -> torch.Tensor:
    """One-hot at the argmax, in the logits' dtype (no int64 copy of the vocabulary-wide tensor)."""
    return torch.zeros_like(logits).scatter_(-1, logits.argmax(dim=-1, keepdim=True), 1.0)


def sample_from(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw: `probs [..., V]` (normalised) and `uniforms [...]` in [0, 1) -> indices `[...]`.

    A token with zero probability is never returned: its CDF step is empty, and a uniform past the
    last rounding-shortened CDF value maps to the last token with positive probability.
    """
    cdf = probs.to(torch.float64).cumsum(dim=-1)
    index = (cdf <= uniforms.to(torch.float64).unsqueeze(-1)).sum(dim=-1)
    last = probs.shape[-1] - 1 - (probs.flip(-1) > 0).to(torch.int64).argmax(dim=-1)
    return torch.minimum(index, last)


def accept_ratio(p_drafted: torch.Tensor, q_drafted: torch.Tensor) -> torch.Tensor:
    """`min(1, p(x) / q(x))` elementwise: the probability each drafted token is accepted.

    q(x) > 0 for any token actually sampled from q; the clamp only keeps padding finite.
    """
    return torch.clamp(p_drafted / q_drafted.clamp(min=torch.finfo(q_drafted.dtype).tiny), max=1.0)


def recovery_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """`norm(max(0, p - q))` over the last dim: where the token after a rejection is drawn from.

    When the residual mass is at rounding level, p and q agree and a rejection has (almost) zero
    probability; p is returned there rather than dividing by rounding noise (as DeepSpec does).
    """
    residual = (p - q).clamp(min=0)
    mass = residual.sum(dim=-1, keepdim=True)
    negligible = mass <= 64 * torch.finfo(p.dtype).eps
    return torch.where(negligible, p, residual / torch.where(negligible, torch.ones_like(mass), mass))


def stop_distribution(
    p: torch.Tensor, q: torch.Tensor, drafted: torch.Tensor, n_verified: torch.Tensor
) -> torch.Tensor:
    """`[B, K + 1]` P(exactly m drafts accepted): survive(m) * (1 - ratio_m) for m < n, survive(n) at
    m = n, 0 past it. Shapes as in `outcome_distribution`; it reads p and q only at the drafted tokens."""
    batch, width, _ = p.shape
    positions = torch.arange(width, device=p.device)
    verified = positions[:-1] < n_verified.unsqueeze(1)
    ratio = accept_ratio(p[:, :-1].gather(-1, drafted.unsqueeze(-1)), q.gather(-1, drafted.unsqueeze(-1))).squeeze(-1)
    ratio = torch.where(verified, ratio, torch.zeros_like(ratio))
    survive = torch.cat((ratio.new_ones(batch, 1), ratio.cumprod(dim=1)), dim=1)
    stop = torch.cat((1 - ratio, ratio.new_ones(batch, 1)), dim=1)
    stop = torch.where(positions == n_verified.unsqueeze(1), torch.ones_like(stop), stop)
    stop = torch.where(positions > n_verified.unsqueeze(1), torch.zeros_like(stop), stop)
    return survive * stop


def outcome_distribution(
    p: torch.Tensor, q: torch.Tensor, drafted: torch.Tensor, n_verified: torch.Tensor
) -> torch.Tensor:
    """The exact law of one verification round: `[B, K + 1, V]`, entry (m, y) = P(m accepted, then y).

    p: target distributions `[B, K + 1, V]` at the K drafted positions and the one after them.
    q: drafter distributions `[B, K, V]` the drafts were sampled from. drafted: `[B, K]` tokens.
    n_verified: `[B]` how many of the K drafts are verified (a prefix; the rest are ignored).
    For m < n: survive(m) * (1 - ratio_m) * recovery_m(y). For m = n: survive(n) * p_n(y), the
    bonus token. Nothing is written to p or q.
    """
    positions = torch.arange(p.shape[1], device=p.device)
    recovered = torch.cat((recovery_distribution(p[:, :-1], q), p[:, -1:]), dim=1)
    at_end = (positions == n_verified.unsqueeze(1)).unsqueeze(-1)
    then = torch.where(at_end, p, recovered)
    return stop_distribution(p, q, drafted, n_verified).unsqueeze(-1) * then


@dataclass(frozen=True)
class Verdict:
    """One round's result per sequence: `n_accepted [B]` drafts held, then `next_token [B]` is emitted.

    `next_token` is the correction drawn after a rejection, or the bonus token when all verified
    drafts held (`bonus [B]`).
    """

    n_accepted: torch.Tensor
    next_token: torch.Tensor
    bonus: torch.Tensor


def accept_block(
    p: torch.Tensor, q: torch.Tensor, drafted: torch.Tensor, n_verified: torch.Tensor, uniforms: torch.Tensor
) -> Verdict:
    """Sample one round of the accept rule: shapes as in `outcome_distribution`, `uniforms [B]` in [0, 1).

    It draws (m, y) by inverse CDF from the exact outcome law ordered by m, then y, with one uniform
    per sequence, so seeded runs stay reproducible whatever was accepted. That is the same as drawing
    u_j per position and stopping at the first `u_j >= min(1, p/q)`. The law is never built whole:
    the uniform first picks m from `stop_distribution`, and what is left of it, rescaled to [0, 1),
    picks y from the one distribution that follows m (the recovery at m, or p_n after all n held),
    so a round costs one vocabulary-wide draw per sequence whatever K is.
    """
    batch, width = p.shape[:2]
    rows = torch.arange(batch, device=p.device)
    stops = stop_distribution(p, q, drafted, n_verified).to(torch.float64)
    before = torch.cat((stops.new_zeros(batch, 1), stops.cumsum(dim=1)[:, :-1]), dim=1)
    uniforms = uniforms.to(device=p.device, dtype=torch.float64)
    m = sample_from(stops, uniforms)
    rest = ((uniforms - before[rows, m]) / stops[rows, m]).clamp(0.0, 1.0)
    bonus = m == n_verified
    p_m = p[rows, m]
    if width > 1:
        recovered = recovery_distribution(p_m, q[rows, m.clamp(max=width - 2)])
        p_m = torch.where(bonus.unsqueeze(-1), p_m, recovered)
    return Verdict(n_accepted=m, next_token=sample_from(p_m, rest), bonus=bonus)


def greedy_verdict(logits: torch.Tensor, drafted: torch.Tensor, n_verified: torch.Tensor) -> Verdict:
    """`accept_block(warp(logits, greedy), q, drafted, n_verified, u)` for a batch of greedy rows, for
    any q that drew the drafts and any u: the drafts held up to the first that is not the argmax, then
    the argmax there. Shapes as in `outcome_distribution`, with `logits [B, K + 1, V]` for p.

    Why: a greedy round needs only the argmaxes, and building the one-hot p and the float64 CDF of
    the whole vocabulary cost a plain step at one sequence about a twentieth of its time."""
    argmax = logits.argmax(dim=-1)
    width = drafted.shape[1]
    held = (drafted == argmax[:, :width]) & (torch.arange(width, device=drafted.device) < n_verified.unsqueeze(1))
    m = held.to(torch.int64).cumprod(dim=1).sum(dim=1)
    return Verdict(n_accepted=m, next_token=argmax.gather(1, m.unsqueeze(1)).squeeze(1), bonus=m == n_verified)
