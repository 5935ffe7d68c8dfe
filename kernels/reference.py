"""Torch reference implementations of Jev's attention kernels.

These are the contracts the Triton kernels are tested against, and the code that runs on CPU.
All of them work on the latent cache layout of MLA in its absorbed ("MQA") form: one shared key
per token, `kv_cache[b, s] = [latent (kv_lora_rank) ‖ rope key (qk_rope_head_dim)]`, and the value
is the latent itself.

Query positions carry the causal structure: query `t` of sequence `b` sits at absolute position
`q_positions[b, t]` and sees every cached position `s <= q_positions[b, t]`. A negative position
marks a padding query: it sees nothing, and its output is zero (never NaN).
"""

import torch

NEG_INF = float("-inf")


def causal_key_mask(q_positions: torch.Tensor, n_keys: int) -> torch.Tensor:
    """`[B, T, L]` bool: key `s` is visible to query `t` when `0 <= s <= q_positions[b, t]`."""
    keys = torch.arange(n_keys, device=q_positions.device)
    return keys.view(1, 1, n_keys) <= q_positions.unsqueeze(-1)


def selected_key_mask(indices: torch.Tensor, n_keys: int) -> torch.Tensor:
    """`[B, T, L]` bool: the keys in each query's top-k selection `indices [B, T, K]` (-1 selects none)."""
    mask = torch.zeros(*indices.shape[:2], n_keys + 1, dtype=torch.bool, device=indices.device)
    mask.scatter_(-1, torch.where(indices < 0, n_keys, indices.long()), True)
    return mask[..., :n_keys]


def _softmax_rows(scores: torch.Tensor, visible: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked softmax over the last axis; rows with no visible key give p = 0 and lse = -inf."""
    scores = scores.masked_fill(~visible, NEG_INF)
    return torch.softmax(scores, dim=-1).nan_to_num(0.0), torch.logsumexp(scores, dim=-1)


def mla_decode(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    kv_cache: torch.Tensor,
    q_positions: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense absorbed MLA attention of new query tokens over the latent cache.

    q_latent: `[B, T, H, d_c]` (W_UK already folded in), q_rope: `[B, T, H, d_r]`,
    kv_cache: `[B, L, d_c + d_r]`, q_positions: `[B, T]` int.
    Returns the output in latent space `[B, T, H, d_c]` and the log-sum-exp `[B, T, H]`.
    """
    size, length, heads, d_c = q_latent.shape
    # One product scores both parts: [q_latent ‖ q_rope] . [latent ‖ rope key], every head as a row.
    query = torch.cat((q_latent, q_rope), dim=-1).view(size, length * heads, -1)
    scores = torch.matmul(query, kv_cache.transpose(1, 2)).view(size, length, heads, -1)
    visible = causal_key_mask(q_positions, kv_cache.shape[1]).unsqueeze(2)
    probs, lse = _softmax_rows(scores * scale, visible)
    out = torch.matmul(probs.view(size, length * heads, -1), kv_cache[..., :d_c])
    return out.view(size, length, heads, d_c), lse


def indexer_logits(
    q: torch.Tensor,
    weights: torch.Tensor,
    k_cache: torch.Tensor,
    q_positions: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """DSA index scores `I[t, s] = sum_j w[t, j] * relu(scale * q[t, j] . k[s])`, -inf where not causal.

    q: `[B, T, H_I, d_I]`, weights: `[B, T, H_I]`, k_cache: `[B, L, d_I]`, q_positions: `[B, T]`.
    Returns float32 `[B, T, L]`. The scale is applied to q (ReLU commutes with a positive factor),
    which saves a pass over the `[B, T, H_I, L]` per-head scores.
    """
    size, length, heads, _ = q.shape
    # Every head of every query as a row of one product: broadcasting the keys over T would copy them.
    per_head = torch.bmm((q.float() * scale).view(size, length * heads, -1), k_cache.float().transpose(1, 2))
    per_head = per_head.view(size, length, heads, -1)
    scores = torch.matmul(weights.float().unsqueeze(-2), per_head.relu_()).squeeze(-2)
    return scores.masked_fill(~causal_key_mask(q_positions, k_cache.shape[1]), NEG_INF)


def select_topk(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Top-`min(k, L)` key indices per query as int32, ascending, `-1` where the score is -inf.

    Masked entries can be picked when a row has fewer than k visible keys; marking them -1 is what
    keeps the selection causal. Every selection is returned in ascending order, so the same set is
    always summed in the same order; the order is read off `_top_k`'s mask, which costs less than
    sorting the indices.
    """
    chosen = _top_k(scores, k)
    ascending = chosen.nonzero()[:, -1].view(*scores.shape[:-1], min(k, scores.shape[-1]))
    return torch.where(scores.gather(-1, ascending) == NEG_INF, -1, ascending).to(torch.int32)


def top_key_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    """`[..., L]` bool: the keys `select_topk` selects, as a mask (what a masked attention reads)."""
    return _top_k(scores, k) & (scores != NEG_INF)


def _top_k(scores: torch.Tensor, k: int) -> torch.Tensor:
    """`[..., L]` bool with exactly `min(k, L)` entries per row: the highest scores, -inf ones too when
    a row has fewer finite ones.

    Ties are common (a score is exactly 0 whenever every head's ReLU is), and `torch.topk` breaks
    them differently for rows of different widths, which would let padding or a neighbour's length
    change a sequence's output. So a row whose k-th and (k+1)-th scores tie is ranked again by an
    exact key (score, then earlier position wins). The top k + 1 come unsorted (a selection, not a
    sort: a third of the time here); the k-th and (k+1)-th tie when their set's least score occurs
    twice in it.
    """
    width = scores.shape[-1]
    top = min(k, width)
    if top == width:
        return torch.ones_like(scores, dtype=torch.bool)
    values, indices = scores.topk(top + 1, dim=-1, sorted=False)
    least, least_at = values.min(dim=-1, keepdim=True)
    # A row with fewer than `top` finite scores selects them all; its ties are among the masked.
    tied = ((values == least).sum(-1) > 1) & (least.squeeze(-1) != NEG_INF)
    # Ones and zeros, not True and False: a traced scatter_ takes no bool value.
    chosen = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, indices, 1)
    chosen.scatter_(-1, indices.gather(-1, least_at), 0)
    # A traced pass (`jev.model.step_graphs`) ranks every row exactly and keeps that for the tied ones:
    # it may not branch on whether its own rows tie, nor index them by a mask (its shape is recorded).
    if torch.jit.is_tracing():
        exact = torch.zeros_like(chosen).scatter_(-1, _exact_topk(scores, top), 1)
        return torch.where(tied.unsqueeze(-1), exact, chosen)
    if bool(tied.any()):
        chosen[tied] = torch.zeros_like(chosen[tied]).scatter_(-1, _exact_topk(scores[tied], top), 1)
    return chosen


def _exact_topk(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Top-k of `[..., L]` rows by score, ties to the earlier position: a stable sort leaves no ties."""
    return scores.sort(dim=-1, descending=True, stable=True).indices[..., :k]


def sparse_mla(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Absorbed MLA attention over the gathered top-k positions only (no dense L x L mask).

    q_latent: `[B, T, H, d_c]`, q_rope: `[B, T, H, d_r]`, kv_cache: `[B, L, d_c + d_r]`,
    indices: `[B, T, K]` int32 with -1 for unused slots. Returns `[B, T, H, d_c]` and lse `[B, T, H]`.
    """
    batch, n_query, top = indices.shape
    d_c = q_latent.shape[-1]
    valid = indices >= 0
    flat = indices.clamp(min=0).long().view(batch, n_query * top, 1).expand(-1, -1, kv_cache.shape[-1])
    gathered = kv_cache.gather(1, flat).view(batch, n_query, top, -1)
    gathered = gathered.masked_fill(~valid.unsqueeze(-1), 0.0)
    latent, rope_key = gathered[..., :d_c], gathered[..., d_c:]
    scores = torch.einsum("bthc,btkc->bthk", q_latent, latent)
    scores = scores + torch.einsum("bthr,btkr->bthk", q_rope, rope_key)
    probs, lse = _softmax_rows(scores * scale, valid.unsqueeze(2))
    return torch.einsum("bthk,btkc->bthc", probs, latent), lse
