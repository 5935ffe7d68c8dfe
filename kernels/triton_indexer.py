"""Triton DSA lightning-indexer logits: `I[t, s] = sum_j w[t, j] * relu(scale * q[t, j] . k[s])`.

Contract: `jev.kernels.reference.indexer_logits` (float32 `[B, T, L]`, -inf where `s > q_positions`).
A program scores one query token (all indexer heads at once, one `tl.dot`) against `BLOCK_N`
cache slots, then reduces over heads in registers, so the per-head `[H_I, L]` scores never reach
memory. Tiles wholly past the token's position load nothing and just write -inf: the keys a
query cannot see are never read (they may be unwritten or NaN).
"""

import torch
import triton
import triton.language as tl
from jev.kernels import triton_launch

BLOCK_N = 64  # cache slots per program


@triton.jit
def _indexer_kernel(
    q, weights, k_cache, positions, out,
    stride_qb, stride_qt, stride_qh, stride_wb, stride_wt, stride_kb, stride_kl, stride_pb, stride_pt,
    n_query, n_heads, n_keys, head_dim, scale,
    BLOCK_N: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, PRECISION: tl.constexpr,
):
    """Program (b * T + t, key block): logits of token t for slots `[block * BLOCK_N, (block + 1) * BLOCK_N)`."""
    query = tl.program_id(0).to(tl.int64)
    b, token = query // n_query, query % n_query
    keys = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    key_mask = keys < n_keys
    position = tl.load(positions + b * stride_pb + token * stride_pt)
    out_ptrs = out + query * n_keys + keys
    if tl.program_id(1) * BLOCK_N <= position:
        heads, dims = tl.arange(0, BLOCK_H), tl.arange(0, BLOCK_D)
        h_mask, d_mask = heads < n_heads, dims < head_dim
        visible = key_mask & (keys <= position)
        q_tile = tl.load(
            q + b * stride_qb + token * stride_qt + heads[:, None] * stride_qh + dims[None, :],
            mask=h_mask[:, None] & d_mask[None, :], other=0.0,
        )
        k_tile = tl.load(
            k_cache + b * stride_kb + keys[:, None] * stride_kl + dims[None, :],
            mask=visible[:, None] & d_mask[None, :], other=0.0,
        )
        w = tl.load(weights + b * stride_wb + token * stride_wt + heads, mask=h_mask, other=0.0).to(tl.float32)
        scores = tl.dot(q_tile.to(k_tile.dtype), tl.trans(k_tile), input_precision=PRECISION) * scale
        logits = tl.sum(tl.maximum(scores, 0.0) * w[:, None], axis=0)
        tl.store(out_ptrs, tl.where(visible, logits, -float("inf")), mask=key_mask)
    else:
        tl.store(out_ptrs, tl.full([BLOCK_N], -float("inf"), dtype=tl.float32), mask=key_mask)


def indexer_logits(
    q: torch.Tensor,
    weights: torch.Tensor,
    k_cache: torch.Tensor,
    q_positions: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """DSA index scores of the new query tokens against the indexer key cache (Triton).

    q: `[B, T, H_I, d_I]`, weights: `[B, T, H_I]`, k_cache: `[B, L, d_I]` (any batch and slot strides),
    q_positions: `[B, T]` int, -1 for padding. Returns float32 `[B, T, L]`, -inf where not visible.
    """
    batch, n_query, n_heads, head_dim = q.shape
    n_keys = k_cache.shape[1]
    if k_cache.stride(-1) != 1:
        k_cache = k_cache.contiguous()
    q, weights = q.contiguous(), weights.contiguous()
    out = torch.empty(batch, n_query, n_keys, dtype=torch.float32, device=k_cache.device)
    if out.numel():
        _indexer_kernel[(batch * n_query, triton.cdiv(n_keys, BLOCK_N))](
            q, weights, k_cache, q_positions, out,
            *q.stride()[:3], weights.stride(0), weights.stride(1), k_cache.stride(0), k_cache.stride(1),
            q_positions.stride(0), q_positions.stride(1),
            n_query, n_heads, n_keys, head_dim, scale,
            BLOCK_N=BLOCK_N, BLOCK_H=triton_launch.padded(n_heads), BLOCK_D=triton_launch.padded(head_dim),
            PRECISION=triton_launch.dot_precision(k_cache.dtype), **triton_launch.pipeline(k_cache.dtype),
        )
    return out
