"""RoPE: relative-position property, the two pair conventions, YaRN and the softmax scale."""

import math

import torch

from jev.model.config import yarn_mscale
from jev.model.rope import RotaryEmbedding, rotate_by, rotate_half_split, rotation, softmax_scale
from tests.tiny import YARN, tiny_config

GEN = torch.Generator().manual_seed(0)


def rotate_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return rotate_by(x, rotation(cos, sin)).to(x.dtype)


def rotated(rotate, rope, vector, position):
    cos, sin = rope(torch.tensor([[position]]), torch.float64)
    return rotate(vector.view(1, 1, -1), cos, sin).view(-1)


def test_dot_products_depend_only_on_relative_position():
    for config in (tiny_config(), tiny_config(**YARN)):
        rope = RotaryEmbedding(config).double()
        q, k = torch.randn(8, generator=GEN, dtype=torch.float64), torch.randn(8, generator=GEN, dtype=torch.float64)
        for rotate in (rotate_interleaved, rotate_half_split):
            near = rotated(rotate, rope, q, 7) @ rotated(rotate, rope, k, 3)
            far = rotated(rotate, rope, q, 104) @ rotated(rotate, rope, k, 100)
            assert torch.allclose(near, far, atol=1e-9)


def test_interleaved_and_half_split_rotate_different_pairs():
    rope = RotaryEmbedding(tiny_config()).double()
    x = torch.zeros(8, dtype=torch.float64)
    x[0] = 1.0
    inter, half = rotated(rotate_interleaved, rope, x, 1), rotated(rotate_half_split, rope, x, 1)
    assert inter[1] != 0 and inter[4] == 0, "interleaved pairs x0 with x1"
    assert half[4] != 0 and half[1] == 0, "half-split pairs x0 with x4"


def test_softmax_scale_is_qk_head_dim_with_yarn_mscale_squared():
    plain = tiny_config()
    assert softmax_scale(plain) == (16 + 8) ** -0.5
    yarn = tiny_config(**YARN)
    mscale = 0.1 * math.log(4.0) + 1
    assert math.isclose(softmax_scale(yarn), (16 + 8) ** -0.5 * mscale**2)
    assert yarn_mscale(1.0) == 1.0


def test_yarn_keeps_high_frequencies_and_stretches_low_ones():
    plain = RotaryEmbedding(tiny_config()).inv_freq
    yarn = RotaryEmbedding(tiny_config(**YARN)).inv_freq
    assert torch.isclose(yarn[0], plain[0]), "fast-rotating dims extrapolate unchanged"
    assert torch.isclose(yarn[-1], plain[-1] / 4.0), "slow dims are interpolated by the factor"
