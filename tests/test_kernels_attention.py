"""Triton `mla_decode` and `sparse_mla` against their torch references, under Triton's interpreter (float32).

Shapes are small (4 heads, d_c 24 so the feature axis is ragged, d_r 8 padded to 16) but cover the
tile boundaries, ragged batches, padding queries, `-1` indices, NaN in slots that must not be read,
split-KV partitions, and several new tokens against the same tokens one at a time.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # read by triton when the kernels are defined

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed: the Triton kernels cannot run")

from jev.kernels import reference, triton_launch, triton_mla_decode, triton_sparse_mla

pytestmark = pytest.mark.slow

if not triton_launch.INTERPRETED:
    pytest.skip("the kernels were defined without TRITON_INTERPRET=1", allow_module_level=True)

HEADS, D_C, D_R, SCALE = 4, 24, 8, 0.3
BLOCK = triton_mla_decode.BLOCK_N
LENGTHS = [1, 7, BLOCK - 1, BLOCK + 1, 45, 300]
TOL = dict(atol=1e-5, rtol=1e-4)


def latent_inputs(batch: int, n_query: int, n_keys: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Queries `[B, T, H, d_c]`, `[B, T, H, d_r]` and a latent cache `[B, L, d_c + d_r]`."""
    gen = torch.Generator().manual_seed(seed)
    q_latent = torch.randn(batch, n_query, HEADS, D_C, generator=gen)
    q_rope = torch.randn(batch, n_query, HEADS, D_R, generator=gen)
    return q_latent, q_rope, torch.randn(batch, n_keys, D_C + D_R, generator=gen)


def decode_positions(lengths: list[int], n_query: int) -> torch.Tensor:
    """`[B, T]`: the last `n_query` positions of each sequence; -1 where a sequence is shorter."""
    ends = torch.tensor(lengths).unsqueeze(1)
    positions = ends - n_query + torch.arange(n_query)
    return torch.where(positions >= 0, positions, -1)


def poisoned(cache: torch.Tensor, visible: list[int]) -> torch.Tensor:
    """A copy with NaN in every slot at or past `visible[b]`: slots a kernel must never read."""
    cache = cache.clone()
    for b, length in enumerate(visible):
        cache[b, length:] = float("nan")
    return cache


def assert_attention_close(actual: tuple[torch.Tensor, torch.Tensor], expected: tuple[torch.Tensor, torch.Tensor]):
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("n_keys", LENGTHS)
@pytest.mark.parametrize("num_splits", [1, 3])
def test_mla_decode_matches_reference_at_every_length(n_keys, num_splits):
    q_latent, q_rope, cache = latent_inputs(1, 1, n_keys, seed=n_keys)
    positions = decode_positions([n_keys], 1)
    got = triton_mla_decode.mla_decode(q_latent, q_rope, cache, positions, SCALE, num_splits=num_splits)
    assert_attention_close(got, reference.mla_decode(q_latent, q_rope, cache, positions, SCALE))


def test_mla_decode_ragged_batch_never_reads_unused_slots():
    """A view of a longer cache (as `LatentCache.view` gives), NaN past each sequence's length."""
    lengths = [5, BLOCK + 1, 45, 300]
    q_latent, q_rope, full = latent_inputs(len(lengths), 2, 320, seed=1)
    cache = poisoned(full, lengths)[:, :300]
    positions = decode_positions(lengths, 2)
    got = triton_mla_decode.mla_decode(q_latent, q_rope, cache, positions, SCALE, num_splits=4)
    assert torch.isfinite(got[0]).all()
    assert_attention_close(got, reference.mla_decode(q_latent, q_rope, full[:, :300], positions, SCALE))


def test_mla_decode_padding_queries_give_zeros_and_no_nan():
    q_latent, q_rope, cache = latent_inputs(2, 3, 40, seed=2)
    positions = torch.tensor([[-1, -1, -1], [20, 21, -1]])
    out, lse = triton_mla_decode.mla_decode(q_latent, q_rope, poisoned(cache, [0, 22]), positions, SCALE)
    assert not out.isnan().any()
    assert (out[0] == 0).all() and (out[1, 2] == 0).all()
    assert (lse[0] == float("-inf")).all() and (lse[1, 2] == float("-inf")).all()
    assert_attention_close((out, lse), reference.mla_decode(q_latent, q_rope, cache, positions, SCALE))


@pytest.mark.parametrize("num_splits", [2, 5, 64])
def test_mla_decode_one_split_equals_many(num_splits):
    """64 partitions of 150 keys leaves most of them empty: they must weigh nothing in the merge."""
    q_latent, q_rope, cache = latent_inputs(2, 1, 150, seed=3)
    positions = decode_positions([150, 90], 1)
    one = triton_mla_decode.mla_decode(q_latent, q_rope, cache, positions, SCALE, num_splits=1)
    many = triton_mla_decode.mla_decode(q_latent, q_rope, cache, positions, SCALE, num_splits=num_splits)
    assert_attention_close(many, one)


def test_mla_decode_several_tokens_equal_one_at_a_time():
    """Speculative verification: 5 new tokens (causal among themselves) vs the same tokens singly."""
    lengths = [BLOCK + 3, 70]
    q_latent, q_rope, cache = latent_inputs(2, 5, 70, seed=4)
    positions = decode_positions(lengths, 5)
    together = triton_mla_decode.mla_decode(q_latent, q_rope, cache, positions, SCALE, num_splits=2)
    assert_attention_close(together, reference.mla_decode(q_latent, q_rope, cache, positions, SCALE))
    for t in range(5):
        one = triton_mla_decode.mla_decode(
            q_latent[:, t : t + 1], q_rope[:, t : t + 1], cache, positions[:, t : t + 1], SCALE, num_splits=2
        )
        assert_attention_close((together[0][:, t : t + 1], together[1][:, t : t + 1]), one)


def causal_topk(n_query: int, n_keys: int, top: int, seed: int) -> torch.Tensor:
    """`[1, T, top]` int32 indices of the last T positions: random causal picks, `-1` where fewer exist."""
    gen = torch.Generator().manual_seed(seed)
    positions = decode_positions([n_keys], n_query)
    scores = torch.rand(1, n_query, n_keys, generator=gen).masked_fill(
        ~reference.causal_key_mask(positions, n_keys), float("-inf")
    )
    return reference.select_topk(scores, top)


@pytest.mark.parametrize("top", LENGTHS)
def test_sparse_mla_matches_reference_at_every_top_k(top):
    q_latent, q_rope, cache = latent_inputs(1, 2, 320, seed=top)
    indices = causal_topk(2, 320, top, seed=top)
    got = triton_sparse_mla.sparse_mla(q_latent, q_rope, cache, indices, SCALE, num_splits=2)
    assert_attention_close(got, reference.sparse_mla(q_latent, q_rope, cache, indices, SCALE))


def test_sparse_mla_skips_minus_one_and_unselected_nan_slots():
    """Scattered -1 entries, a row with no valid index (zeros, lse -inf), NaN in every unselected slot."""
    q_latent, q_rope, cache = latent_inputs(2, 3, 60, seed=5)
    gen = torch.Generator().manual_seed(5)
    indices = torch.randint(0, 60, (2, 3, BLOCK + 1), generator=gen, dtype=torch.int32)
    indices[torch.rand(indices.shape, generator=gen) < 0.3] = -1
    indices[1, 2] = -1
    selected = torch.zeros(2, 60, dtype=torch.bool)
    for b in range(2):
        selected[b, indices[b][indices[b] >= 0].long()] = True
    dirty = cache.masked_fill(~selected.unsqueeze(-1), float("nan"))
    out, lse = triton_sparse_mla.sparse_mla(q_latent, q_rope, dirty, indices, SCALE, num_splits=2)
    assert not out.isnan().any()
    assert (out[1, 2] == 0).all() and (lse[1, 2] == float("-inf")).all()
    assert_attention_close((out, lse), reference.sparse_mla(q_latent, q_rope, cache, indices, SCALE))


@pytest.mark.parametrize("num_splits", [3, 64])
def test_sparse_mla_one_split_equals_many(num_splits):
    q_latent, q_rope, cache = latent_inputs(1, 2, 200, seed=6)
    indices = causal_topk(2, 200, 150, seed=6)
    one = triton_sparse_mla.sparse_mla(q_latent, q_rope, cache, indices, SCALE, num_splits=1)
    assert_attention_close(triton_sparse_mla.sparse_mla(q_latent, q_rope, cache, indices, SCALE, num_splits), one)


def test_sparse_mla_prefill_tokens_equal_one_at_a_time():
    """Prefill-style: 6 tokens, each with its own causal top-k (early ones padded with -1)."""
    q_latent, q_rope, cache = latent_inputs(1, 6, 9, seed=7)
    indices = causal_topk(6, 9, 8, seed=7)
    together = triton_sparse_mla.sparse_mla(q_latent, q_rope, cache, indices, SCALE)
    assert_attention_close(together, reference.sparse_mla(q_latent, q_rope, cache, indices, SCALE))
    for t in range(6):
        rows = slice(t, t + 1)
        one = triton_sparse_mla.sparse_mla(q_latent[:, rows], q_rope[:, rows], cache, indices[:, rows], SCALE)
        assert_attention_close((together[0][:, rows], together[1][:, rows]), one)
