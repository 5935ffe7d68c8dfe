"""`fused_cpu.mla_attention`, as `ops` calls it off the GPU, against the explicit contracts
`reference.mla_decode` and `reference.sparse_mla` (float32 and float64)."""

import pytest
import torch
from jev.kernels import ops, reference

HEADS, D_C, D_R, SCALE = 4, 24, 8, 0.3


def inputs(batch: int, n_query: int, n_keys: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(n_keys)
    q_latent = torch.randn(batch, n_query, HEADS, D_C, generator=gen, dtype=dtype)
    q_rope = torch.randn(batch, n_query, HEADS, D_R, generator=gen, dtype=dtype)
    return q_latent, q_rope, torch.randn(batch, n_keys, D_C + D_R, generator=gen, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("n_query", "n_keys"), [(1, 1), (1, 121), (3, 40), (8, 200)])
def test_equals_the_reference_on_ragged_rows(dtype, n_query, n_keys):
    q_latent, q_rope, cache = inputs(3, n_query, n_keys, dtype)
    ends = torch.tensor([n_keys, max(n_keys // 2, 1), max(n_keys - 5, 1)]).unsqueeze(1)
    positions = ends - n_query + torch.arange(n_query)
    positions = torch.where(positions >= 0, positions, -1)
    got = ops.mla_attention(q_latent, q_rope, cache, positions, SCALE)
    want, _ = reference.mla_decode(q_latent, q_rope, cache, positions, SCALE)
    tolerance = 1e-12 if dtype == torch.float64 else 1e-6
    torch.testing.assert_close(got, want, atol=tolerance, rtol=tolerance)


def test_slots_a_query_does_not_see_change_nothing_and_padding_queries_give_zeros():
    """Slots past a row's length hold stale drafts' latents: large, finite, never read."""
    q_latent, q_rope, cache = inputs(3, 4, 40)
    positions = torch.tensor([[36, 37, 38, 39], [5, 6, -1, -1], [-1, -1, -1, -1]])
    stale = cache.clone()
    stale[1, 7:] = 1e4
    stale[2] = -1e4
    got = ops.mla_attention(q_latent, q_rope, stale, positions, SCALE)
    want, _ = reference.mla_decode(q_latent, q_rope, cache, positions, SCALE)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    assert bool((got[positions < 0] == 0).all())


@pytest.mark.parametrize(("n_query", "n_keys", "top"), [(1, 30, 8), (3, 40, 40), (8, 200, 64)])
def test_a_selection_equals_the_gathering_reference(n_query, n_keys, top):
    q_latent, q_rope, cache = inputs(2, n_query, n_keys)
    positions = n_keys - n_query + torch.arange(n_query).expand(2, -1)
    scores = torch.randn(2, n_query, n_keys, generator=torch.Generator().manual_seed(1))
    indices = reference.select_topk(scores.masked_fill(torch.arange(n_keys) > positions.unsqueeze(-1), -torch.inf), top)
    indices[1, 0] = -1  # a query that selects nothing gives zeros
    got = ops.sparse_mla_attention(q_latent, q_rope, cache, indices, SCALE)
    want, _ = reference.sparse_mla(q_latent, q_rope, cache, indices, SCALE)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    assert bool((got[1, 0] == 0).all())
