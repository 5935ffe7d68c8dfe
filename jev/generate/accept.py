"""The sampling filter and the lossless accept rule: pure functions on probability tensors.

Plain decoding and speculative decoding both turn logits into the distribution they sample from
with `warp`, so the two agree exactly. The accept rule (Leviathan et al. 2023; Chen et al. 2023)
accepts drafted token j with probability `min(1, p_j(x_j) / q_j(x_j))`, draws the token after the
first rejection from `norm(max(0, p_j - q_j))`, and draws a bonus token from `p_{n+1}` when all
n verified drafts held. p is the target's distribution AFTER the request's temperature / top-k /
top-p; q is exactly the distribution each drafted token was sampled from.

`outcome_distribution` writes the rule down as the exact probability of each round outcome
(m drafts accepted, then token y), and `accept_block` samples one outcome from it with one uniform
per sequence. The exact tests enumerate the same function the sampler draws from. Greedy requests
(temperature 0) get a one-hot p at the argmax, under which the rule accepts a draft iff it is the
argmax and emits the argmax otherwise, whatever q was.
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
    one_hot = torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(probs.dtype)
    return torch.where(greedy, one_hot, probs)


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
    batch, width, _ = p.shape
    positions = torch.arange(width, device=p.device)
    verified = positions[:-1] < n_verified.unsqueeze(1)
    ratio = accept_ratio(p[:, :-1].gather(-1, drafted.unsqueeze(-1)), q.gather(-1, drafted.unsqueeze(-1))).squeeze(-1)
    ratio = torch.where(verified, ratio, torch.zeros_like(ratio))
    survive = torch.cat((ratio.new_ones(batch, 1), ratio.cumprod(dim=1)), dim=1)
    stop = torch.cat((1 - ratio, ratio.new_ones(batch, 1)), dim=1)
    stop = torch.where(positions == n_verified.unsqueeze(1), torch.ones_like(stop), stop)
    stop = torch.where(positions > n_verified.unsqueeze(1), torch.zeros_like(stop), stop)
    recovered = torch.cat((recovery_distribution(p[:, :-1], q), p[:, -1:]), dim=1)
    at_end = (positions == n_verified.unsqueeze(1)).unsqueeze(-1)
    then = torch.where(at_end, p, recovered)
    return (survive * stop).unsqueeze(-1) * then


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

    Drawing (m, y) from the exact outcome law with one uniform is the same distribution as drawing
    u_j per position and stopping at the first `u_j >= min(1, p/q)`; it needs one random number
    per sequence and round, so seeded runs stay reproducible whatever was accepted.
    """
    outcomes = outcome_distribution(p, q, drafted, n_verified)
    vocab = p.shape[-1]
    flat = sample_from(outcomes.flatten(1), uniforms)
    n_accepted = flat // vocab
    return Verdict(n_accepted=n_accepted, next_token=flat % vocab, bonus=n_accepted == n_verified)
