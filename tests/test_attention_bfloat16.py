"""The explicit bfloat16 causal attention of fresh sequences (`jev.model.mla.explicit_causal_attention`).

It replaces SDPA's fused kernel on bfloat16 decision and prompt passes where the CPU has no AMX, so
it is checked against float64 attention written out as a loop over queries, at SDPA's own bfloat16
error, and across the chunks it splits a batch into.
"""

import math

import pytest
import torch

from jev.model import mla as mla_module
from jev.model.mla import explicit_causal_attention

SCALE = 96**-0.5


def looped_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """float64 causal attention, one query at a time: `[B, H, T, d]` -> `[B, H, T, d_v]`."""
    query, key, value = query.double(), key.double(), value.double()
    out = torch.empty(*query.shape[:3], value.shape[-1], dtype=torch.float64)
    for t in range(query.shape[2]):
        scores = query[:, :, t : t + 1] @ key[:, :, : t + 1].transpose(-1, -2) * SCALE
        out[:, :, t] = (torch.softmax(scores, -1) @ value[:, :, : t + 1]).squeeze(2)
    return out


def random_heads(size: int, length: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Queries and keys `[B, 9, T, 96]` and values `[B, 9, T, 64]` (the shipped model's heads), in bfloat16."""
    generator = torch.Generator().manual_seed(seed)
    query, key = (3 * torch.randn(size, 9, length, 96, generator=generator) for _ in range(2))
    value = torch.randn(size, 9, length, 64, generator=generator)
    return query.bfloat16(), key.bfloat16(), value.bfloat16()


@pytest.mark.parametrize("length", [1, 7, 130])
def test_it_is_causal_attention_at_sdpas_bfloat16_error(length):
    # scores reach 25-45 here (an attention sink's reach 80 in the shipped model): rounding them to
    # bfloat16 as they are would triple SDPA's mean error, and fail this test
    query, key, value = random_heads(2, length, seed=length)
    reference = looped_attention(query, key, value)
    got = explicit_causal_attention(query, key, value, SCALE)
    assert got.dtype == torch.bfloat16 and got.shape == reference.shape
    sdpa = mla_module.fused_causal_attention(query, key, value, SCALE)
    error, sdpa_error = (got.double() - reference).abs(), (sdpa.double() - reference).abs()
    assert error.mean() < 1.5 * sdpa_error.mean() + 1e-6
    assert error.max() < 2 * sdpa_error.max() + 1e-3


def test_a_row_comes_out_the_same_alone_and_in_a_chunked_batch(monkeypatch):
    query, key, value = random_heads(5, 40, seed=1)
    monkeypatch.setattr(mla_module, "SCORES_PER_CHUNK", 2 * 9 * 40 * 40)  # chunks of 2, 2 and 1 rows
    batched = explicit_causal_attention(query, key, value, SCALE)
    for row in range(5):
        alone = explicit_causal_attention(query[row : row + 1], key[row : row + 1], value[row : row + 1], SCALE)
        assert torch.equal(batched[row : row + 1], alone)


def test_a_right_padded_row_reads_none_of_its_padding():
    query, key, value = random_heads(1, 12, seed=2)
    short = explicit_causal_attention(query[:, :, :8], key[:, :, :8], value[:, :, :8], SCALE)
    noise = torch.full_like(key[:, :, 8:], math.pi)
    padded = explicit_causal_attention(
        query, torch.cat((key[:, :, :8], noise), 2), torch.cat((value[:, :, :8], noise[..., :64]), 2), SCALE
    )
    assert torch.equal(padded[:, :, :8], short)
