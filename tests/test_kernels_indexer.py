"""Triton `indexer_logits` against its torch reference, under Triton's interpreter (float32).

6 indexer heads of size 20 (both padded inside the kernel) so masking of the head and feature
axes is exercised. The -inf pattern must match exactly; finite scores within atol 1e-5, rtol 1e-4.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # read by triton when the kernels are defined

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed: the Triton kernels cannot run")

from jev.kernels import reference, triton_indexer, triton_launch

if not triton_launch.INTERPRETED:
    pytest.skip("the kernels were defined without TRITON_INTERPRET=1", allow_module_level=True)

HEADS, DIM, SCALE = 6, 20, 20**-0.5
BLOCK = triton_indexer.BLOCK_N


def indexer_inputs(batch: int, n_query: int, n_keys: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Queries `[B, T, H_I, d_I]`, head weights `[B, T, H_I]` (signed, as learned) and keys `[B, L, d_I]`."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, n_query, HEADS, DIM, generator=gen)
    weights = torch.randn(batch, n_query, HEADS, generator=gen)
    return q, weights, torch.randn(batch, n_keys, DIM, generator=gen)


def last_positions(lengths: list[int], n_query: int) -> torch.Tensor:
    """`[B, T]`: the last `n_query` positions of each sequence; -1 where a sequence is shorter."""
    positions = torch.tensor(lengths).unsqueeze(1) - n_query + torch.arange(n_query)
    return torch.where(positions >= 0, positions, -1)


def assert_logits_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == torch.float32
    assert torch.equal(actual == float("-inf"), expected == float("-inf"))
    finite = expected.isfinite()
    torch.testing.assert_close(actual[finite], expected[finite], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("n_keys", [1, 7, BLOCK - 1, BLOCK + 1, 45, 300])
def test_indexer_logits_match_reference_at_every_length(n_keys):
    q, weights, keys = indexer_inputs(1, 1, n_keys, seed=n_keys)
    positions = last_positions([n_keys], 1)
    got = triton_indexer.indexer_logits(q, weights, keys, positions, SCALE)
    assert_logits_close(got, reference.indexer_logits(q, weights, keys, positions, SCALE))


def test_indexer_logits_ragged_batch_never_reads_unwritten_keys():
    """Key cache viewed out of a longer one, NaN in every slot past a sequence's length, a padding query."""
    lengths = [3, BLOCK + 1, 150]
    q, weights, full = indexer_inputs(3, 2, 160, seed=1)
    dirty = full.clone()
    for b, length in enumerate(lengths):
        dirty[b, length:] = float("nan")
    positions = last_positions(lengths, 2)
    positions[0, 0] = -1
    got = triton_indexer.indexer_logits(q, weights, dirty[:, :150], positions, SCALE)
    assert not got.isnan().any()
    assert (got[0, 0] == float("-inf")).all()
    assert_logits_close(got, reference.indexer_logits(q, weights, full[:, :150], positions, SCALE))


def test_indexer_logits_prefill_tokens_equal_one_at_a_time():
    """Causal prefill across a tile boundary: all tokens at once vs each token alone."""
    n_query = 9
    q, weights, keys = indexer_inputs(1, n_query, BLOCK + 4, seed=2)
    positions = last_positions([BLOCK + 4], n_query)
    together = triton_indexer.indexer_logits(q, weights, keys, positions, SCALE)
    assert_logits_close(together, reference.indexer_logits(q, weights, keys, positions, SCALE))
    for t in range(n_query):
        rows = slice(t, t + 1)
        one = triton_indexer.indexer_logits(q[:, rows], weights[:, rows], keys, positions[:, rows], SCALE)
        assert_logits_close(together[:, rows], one)
