"""Split-KV online softmax for the MLA kernels: one key tile's update, a partition's result, the LSE merge.

A program of `mla_decode` or `sparse_mla` attends a block of query rows to one partition of the keys
and stores a partial result: the partition's normalised output and its log-sum-exp. `merge_splits`
then combines the partitions of each row, weighting each by `exp(lse_i - max lse)`.

Inside tiles the "minus infinity" is the finite `SENTINEL`: with a true -inf, a tile whose keys are
all masked gives `-inf - -inf = NaN`. Masked probabilities are zeroed explicitly and a row that saw
no key (`l == 0`) yields output 0 and lse -inf instead of dividing by zero.
"""

import torch
import triton
import triton.language as tl
from jev.kernels import triton_launch

SENTINEL = tl.constexpr(-1.0e30)
# A partial lse above this is a real one; at or below it the partition saw no key.
_EMPTY_BELOW = tl.constexpr(-1.0e29)


@triton.jit
def attend_tile(q_lat, q_rope, kv_lat, kv_rope, visible, m_i, l_i, acc, scale, PRECISION: tl.constexpr):
    """Online-softmax update of rows `[M]` with one key tile.

    q_lat `[M, C]`, q_rope `[M, R]`, kv_lat `[N, C]` (key and value), kv_rope `[N, R]`,
    visible `[M, N]` bool; running max m_i `[M]`, row sum l_i `[M]`, acc `[M, C]` float32.
    """
    scores = tl.dot(q_lat, tl.trans(kv_lat), input_precision=PRECISION)
    scores += tl.dot(q_rope, tl.trans(kv_rope), input_precision=PRECISION)
    scores = tl.where(visible, scores * scale, SENTINEL)
    m_new = tl.maximum(m_i, tl.max(scores, axis=1))
    alpha = tl.exp(m_i - m_new)
    p = tl.where(visible, tl.exp(scores - m_new[:, None]), 0.0)
    l_new = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(kv_lat.dtype), kv_lat, input_precision=PRECISION)
    return m_new, l_new, acc


@triton.jit
def store_partial(o_ptrs, lse_ptrs, row_mask, c_mask, m_i, l_i, acc):
    """Store a partition's normalised output `[M, C]` and lse `[M]` (SENTINEL if it saw no key)."""
    seen = l_i > 0
    safe_l = tl.where(seen, l_i, 1.0)
    tl.store(o_ptrs, acc / safe_l[:, None], mask=row_mask[:, None] & c_mask[None, :])
    tl.store(lse_ptrs, tl.where(seen, m_i + tl.log(safe_l), SENTINEL), mask=row_mask)


@triton.jit
def _merge_kernel(o_part, lse_part, out, lse_out, n_splits, d_c, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    """One row: `o_part [rows, S, d_c]`, `lse_part [rows, S]` -> `out [rows, d_c]`, `lse_out [rows]`."""
    row = tl.program_id(0).to(tl.int64)
    splits = tl.arange(0, BLOCK_S)
    cols = tl.arange(0, BLOCK_C)
    c_mask = cols < d_c
    lse = tl.load(lse_part + row * n_splits + splits, mask=splits < n_splits, other=SENTINEL)
    top = tl.max(lse, axis=0)
    total = tl.sum(tl.where(lse > _EMPTY_BELOW, tl.exp(lse - top), 0.0), axis=0)
    acc = tl.zeros([BLOCK_C], dtype=tl.float32)
    for split in range(n_splits):
        lse_i = tl.load(lse_part + row * n_splits + split)
        weight = tl.where(lse_i > _EMPTY_BELOW, tl.exp(lse_i - top), 0.0)
        acc += weight * tl.load(o_part + (row * n_splits + split) * d_c + cols, mask=c_mask, other=0.0)
    seen = total > 0
    safe_total = tl.where(seen, total, 1.0)
    tl.store(out + row * d_c + cols, (acc / safe_total).to(out.dtype.element_ty), mask=c_mask)
    lse_row = tl.where(seen, top + tl.log(safe_total), -float("inf"))
    tl.store(lse_out + row, lse_row.to(lse_out.dtype.element_ty))


def partial_buffers(n_rows: int, n_splits: int, d_c: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Float32 partial outputs `[n_rows, n_splits, d_c]` and lse `[n_rows, n_splits]`; every entry is written."""
    o_part = torch.empty(n_rows, n_splits, d_c, dtype=torch.float32, device=device)
    return o_part, torch.empty(n_rows, n_splits, dtype=torch.float32, device=device)


def merge_splits(o_part: torch.Tensor, lse_part: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge partitions: `[rows, S, d_c]`, `[rows, S]` -> output `[rows, d_c]` and lse `[rows]` in `dtype`."""
    n_rows, n_splits, d_c = o_part.shape
    out = torch.empty(n_rows, d_c, dtype=dtype, device=o_part.device)
    lse = torch.empty(n_rows, dtype=dtype, device=o_part.device)
    if n_rows:
        _merge_kernel[(n_rows,)](
            o_part, lse_part, out, lse, n_splits, d_c,
            BLOCK_S=triton.next_power_of_2(n_splits), BLOCK_C=triton_launch.padded(d_c), num_warps=4,
        )
    return out, lse
