"""Triton sparse MLA (DSA): absorbed attention over each query's top-k cache slots, for decode and prefill.

Contract: `jev.kernels.reference.sparse_mla`. Each query token has its own index list, so a program
takes `BLOCK_M` heads of one token and gathers its selected slots tile by tile straight from the
latent cache (no dense mask, no gathered copy in memory). Index `-1` (or any slot outside the cache)
is skipped without being loaded; a token with no valid index gets output 0 and lse -inf. The top-k
axis is split into partitions, merged by log-sum-exp, so a single decode token still fills the GPU.
"""

import torch
import triton
import triton.language as tl
from jev.kernels import triton_launch
from jev.kernels.triton_splitkv import SENTINEL, attend_tile, merge_splits, partial_buffers, store_partial

BLOCK_N = 32  # selected slots per tile


@triton.jit
def _sparse_mla_kernel(
    q_lat, q_rope, kv, indices, o_part, lse_part,
    stride_qb, stride_qt, stride_qh, stride_rb, stride_rt, stride_rh,
    stride_kvb, stride_kvl, stride_ib, stride_it,
    n_query, n_heads, n_keys, n_top, d_c, d_r, split_len, n_splits, scale,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_R: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Program (b * T + t, head block, split): heads of token t against one partition of its indices."""
    query = tl.program_id(0).to(tl.int64)
    b, token = query // n_query, query % n_query
    heads = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    split = tl.program_id(2)
    head_mask = heads < n_heads
    cols, rope_cols = tl.arange(0, BLOCK_C), tl.arange(0, BLOCK_R)
    c_mask, r_mask = cols < d_c, rope_cols < d_r

    q_rows = b * stride_qb + token * stride_qt + heads[:, None] * stride_qh
    q_l = tl.load(q_lat + q_rows + cols[None, :], mask=head_mask[:, None] & c_mask[None, :], other=0.0)
    q_l = q_l.to(kv.dtype.element_ty)
    r_rows = b * stride_rb + token * stride_rt + heads[:, None] * stride_rh
    q_r = tl.load(q_rope + r_rows + rope_cols[None, :], mask=head_mask[:, None] & r_mask[None, :], other=0.0)
    q_r = q_r.to(kv.dtype.element_ty)

    start = split * split_len
    end = tl.minimum(start + split_len, n_top)
    m_i = tl.full([BLOCK_M], SENTINEL, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_C], dtype=tl.float32)
    for tile in range(start, end, BLOCK_N):
        picks = tile + tl.arange(0, BLOCK_N)
        slot = tl.load(indices + b * stride_ib + token * stride_it + picks, mask=picks < end, other=-1)
        valid = (slot >= 0) & (slot < n_keys)
        slots = kv + b * stride_kvb + slot.to(tl.int64)[:, None] * stride_kvl
        kv_l = tl.load(slots + cols[None, :], mask=valid[:, None] & c_mask[None, :], other=0.0)
        kv_r = tl.load(slots + d_c + rope_cols[None, :], mask=valid[:, None] & r_mask[None, :], other=0.0)
        visible = head_mask[:, None] & valid[None, :]
        m_i, l_i, acc = attend_tile(q_l, q_r, kv_l, kv_r, visible, m_i, l_i, acc, scale, PRECISION)

    out_rows = (query * n_heads + heads) * n_splits + split
    o_ptrs = o_part + out_rows[:, None] * d_c + cols[None, :]
    store_partial(o_ptrs, lse_part + out_rows, head_mask, c_mask, m_i, l_i, acc)


def sparse_mla(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    scale: float,
    num_splits: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Absorbed MLA attention over the gathered top-k slots only (Triton).

    q_latent: `[B, T, H, d_c]`, q_rope: `[B, T, H, d_r]`, kv_cache: `[B, L, d_c + d_r]` (any batch and
    slot strides), indices: `[B, T, K]` int, -1 for unused. Returns `[B, T, H, d_c]` and lse `[B, T, H]`
    in q_latent's dtype. `num_splits` forces the number of partitions of the K axis.
    """
    batch, n_query, n_heads, d_c = q_latent.shape
    n_keys, d_r, n_top = kv_cache.shape[1], q_rope.shape[-1], indices.shape[-1]
    if kv_cache.stride(-1) != 1:
        kv_cache = kv_cache.contiguous()
    q_latent, q_rope, indices = q_latent.contiguous(), q_rope.contiguous(), indices.contiguous()
    head_blocks = triton.cdiv(n_heads, triton_launch.BLOCK_M)
    n_splits = triton_launch.split_count(n_top, batch * n_query * head_blocks, kv_cache.device, num_splits)
    split_len = triton_launch.split_length(n_top, n_splits, BLOCK_N)
    o_part, lse_part = partial_buffers(batch * n_query * n_heads, n_splits, d_c, kv_cache.device)
    if o_part.numel():
        _sparse_mla_kernel[(batch * n_query, head_blocks, n_splits)](
            q_latent, q_rope, kv_cache, indices, o_part, lse_part,
            *q_latent.stride()[:3], *q_rope.stride()[:3], kv_cache.stride(0), kv_cache.stride(1),
            indices.stride(0), indices.stride(1),
            n_query, n_heads, n_keys, n_top, d_c, d_r, split_len, n_splits, scale,
            BLOCK_M=triton_launch.BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_C=triton_launch.padded(d_c),
            BLOCK_R=triton_launch.padded(d_r), PRECISION=triton_launch.dot_precision(kv_cache.dtype),
            **triton_launch.pipeline(kv_cache.dtype),
        )
    out, lse = merge_splits(o_part, lse_part, q_latent.dtype)
    return out.view(batch, n_query, n_heads, d_c), lse.view(batch, n_query, n_heads)
