"""Triton absorbed-MLA decode over the latent cache: split-KV with a log-sum-exp merge.

Contract: `jev.kernels.reference.mla_decode` (same arguments, same results). Decode is bound by
reading the cache, so a program takes `BLOCK_M` query rows of one sequence, flattened over
(new token, head), and streams each cache tile once for all of them: every head and every
speculative token of a sequence shares the single latent KV head. The key axis is cut into
partitions (split-KV) so short batches still fill the GPU; `merge_splits` combines them.

A program reads only cache slots below `max(q_positions[b]) + 1` of its rows, never the rest of
the batch's `L`, so unused slots (even NaN-filled ones) cannot reach the output.
"""

import torch
import triton
import triton.language as tl
from jev.kernels import triton_launch
from jev.kernels.triton_splitkv import SENTINEL, attend_tile, merge_splits, partial_buffers, store_partial

BLOCK_N = 32  # cache slots per tile


@triton.jit
def _mla_decode_kernel(
    q_lat, q_rope, kv, positions, o_part, lse_part,
    stride_qb, stride_qt, stride_qh, stride_rb, stride_rt, stride_rh,
    stride_kvb, stride_kvl, stride_pb, stride_pt,
    n_query, n_heads, n_keys, d_c, d_r, split_len, n_splits, scale,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_R: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Program (b, row block, split): rows `t * H + h` of sequence b against one key partition."""
    b = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    split = tl.program_id(2)
    row_mask = rows < n_query * n_heads
    token, head = rows // n_heads, rows % n_heads
    cols, rope_cols = tl.arange(0, BLOCK_C), tl.arange(0, BLOCK_R)
    c_mask, r_mask = cols < d_c, rope_cols < d_r

    position = tl.load(positions + b * stride_pb + token * stride_pt, mask=row_mask, other=-1)
    seen_keys = tl.minimum(tl.max(position, axis=0) + 1, n_keys)
    start = split * split_len
    end = tl.minimum(start + split_len, seen_keys)

    q_rows = b * stride_qb + token[:, None] * stride_qt + head[:, None] * stride_qh
    q_l = tl.load(q_lat + q_rows + cols[None, :], mask=row_mask[:, None] & c_mask[None, :], other=0.0)
    q_l = q_l.to(kv.dtype.element_ty)
    r_rows = b * stride_rb + token[:, None] * stride_rt + head[:, None] * stride_rh
    q_r = tl.load(q_rope + r_rows + rope_cols[None, :], mask=row_mask[:, None] & r_mask[None, :], other=0.0)
    q_r = q_r.to(kv.dtype.element_ty)

    m_i = tl.full([BLOCK_M], SENTINEL, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_C], dtype=tl.float32)
    for tile in range(start, end, BLOCK_N):
        keys = tile + tl.arange(0, BLOCK_N)
        key_mask = keys < end
        slots = kv + b * stride_kvb + keys[:, None] * stride_kvl
        kv_l = tl.load(slots + cols[None, :], mask=key_mask[:, None] & c_mask[None, :], other=0.0)
        kv_r = tl.load(slots + d_c + rope_cols[None, :], mask=key_mask[:, None] & r_mask[None, :], other=0.0)
        visible = key_mask[None, :] & (keys[None, :] <= position[:, None])
        m_i, l_i, acc = attend_tile(q_l, q_r, kv_l, kv_r, visible, m_i, l_i, acc, scale, PRECISION)

    out_rows = (b * n_query * n_heads + rows) * n_splits + split
    o_ptrs = o_part + out_rows[:, None] * d_c + cols[None, :]
    store_partial(o_ptrs, lse_part + out_rows, row_mask, c_mask, m_i, l_i, acc)


def mla_decode(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    kv_cache: torch.Tensor,
    q_positions: torch.Tensor,
    scale: float,
    num_splits: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense absorbed MLA attention of new query tokens over the latent cache (Triton).

    q_latent: `[B, T, H, d_c]`, q_rope: `[B, T, H, d_r]`, kv_cache: `[B, L, d_c + d_r]` (any batch and
    slot strides, e.g. a view of a longer cache), q_positions: `[B, T]` int, -1 for padding queries.
    Returns the output in latent space `[B, T, H, d_c]` and the lse `[B, T, H]`, both in q_latent's
    dtype. `num_splits` forces the number of key partitions (default: enough to fill the GPU).
    """
    batch, n_query, n_heads, d_c = q_latent.shape
    n_keys, d_r = kv_cache.shape[1], q_rope.shape[-1]
    if kv_cache.stride(-1) != 1:
        kv_cache = kv_cache.contiguous()
    q_latent, q_rope = q_latent.contiguous(), q_rope.contiguous()
    row_blocks = triton.cdiv(n_query * n_heads, triton_launch.BLOCK_M)
    n_splits = triton_launch.split_count(n_keys, batch * row_blocks, kv_cache.device, num_splits)
    split_len = triton_launch.split_length(n_keys, n_splits, BLOCK_N)
    o_part, lse_part = partial_buffers(batch * n_query * n_heads, n_splits, d_c, kv_cache.device)
    if o_part.numel():
        _mla_decode_kernel[(batch, row_blocks, n_splits)](
            q_latent, q_rope, kv_cache, q_positions, o_part, lse_part,
            *q_latent.stride()[:3], *q_rope.stride()[:3], kv_cache.stride(0), kv_cache.stride(1),
            q_positions.stride(0), q_positions.stride(1),
            n_query, n_heads, n_keys, d_c, d_r, split_len, n_splits, scale,
            BLOCK_M=triton_launch.BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_C=triton_launch.padded(d_c),
            BLOCK_R=triton_launch.padded(d_r), PRECISION=triton_launch.dot_precision(kv_cache.dtype),
            **triton_launch.pipeline(kv_cache.dtype),
        )
    out, lse = merge_splits(o_part, lse_part, q_latent.dtype)
    return out.view(batch, n_query, n_heads, d_c), lse.view(batch, n_query, n_heads)
