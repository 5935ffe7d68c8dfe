"""Rotary position embeddings, YaRN scaling and the MLA softmax scale.

MLA rotates adjacent pairs `(x0, x1), (x2, x3), ...` (interleaved); the DSA indexer rotates the
two halves `(x_i, x_{i + d/2})` (half-split, DeepSeek's own convention since the Nov-2025 fix).
Both use the same frequencies, so one table of angles serves both.
"""

import math

import torch
from torch import nn

from jev.model.config import ModelConfig, yarn_mscale


def rope_frequencies(config: ModelConfig) -> tuple[torch.Tensor, float]:
    """Inverse frequencies `[d_r / 2]` and the factor YaRN multiplies into cos and sin."""
    dim, base = config.qk_rope_head_dim, config.rope_theta
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)
    inv_freq = 1.0 / pos_freqs
    if config.rope_type != "yarn":
        return inv_freq, 1.0
    scaling = config.rope_scaling or {}
    factor = scaling["factor"]
    original = scaling["original_max_position_embeddings"]
    attention_factor = scaling.get("attention_factor")
    mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
        else:
            attention_factor = yarn_mscale(factor)
    low, high = _yarn_correction_range(scaling, dim, base, original)
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolation_weight = 1 - ramp
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation_weight) + inv_freq * extrapolation_weight
    return inv_freq, float(attention_factor)


def _yarn_correction_range(scaling: dict, dim: int, base: float, original: int) -> tuple[float, float]:
    """The band of dimensions YaRN blends between extrapolation and interpolation."""

    def dim_for_rotations(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low = dim_for_rotations(scaling.get("beta_fast") or 32)
    high = dim_for_rotations(scaling.get("beta_slow") or 1)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    return low, high


def softmax_scale(config: ModelConfig) -> float:
    """`(qk_nope + qk_rope)^-0.5`, times YaRN's mscale^2: the same in the expanded and absorbed forms."""
    scale = config.qk_head_dim**-0.5
    if config.rope_type == "yarn":
        scaling = config.rope_scaling or {}
        mscale_all_dim = scaling.get("mscale_all_dim", 0)
        if mscale_all_dim:
            mscale = yarn_mscale(scaling["factor"], mscale_all_dim)
            scale = scale * mscale * mscale
    return scale


class RotaryEmbedding(nn.Module):
    """Maps absolute positions to the cos/sin tables `[B, T, d_r / 2]` shared by every layer."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        inv_freq, self.attention_factor = rope_frequencies(config)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        angles = positions.clamp(min=0).unsqueeze(-1).float() * self.inv_freq
        cos = angles.cos() * self.attention_factor
        sin = angles.sin() * self.attention_factor
        return cos.to(dtype), sin.to(dtype)


def rotation(cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The turn `cos + i sin` `[B, T, d / 2]` (complex64) that `rotate_by` multiplies pairs by."""
    return torch.complex(cos.to(torch.float32), sin.to(torch.float32))


def rotate_by(x: torch.Tensor, turn: torch.Tensor) -> torch.Tensor:
    """Rotate adjacent pairs of `x [B, T, ..., d]` by `turn [B, T, d / 2]` (`rotation`), in float32.

    Each pair is a complex number times `cos + i sin`: the same products as the real formula, in a
    few ops instead of a dozen. A pass makes its turn once and every layer reuses it."""
    pairs = torch.view_as_complex(x.to(torch.float32).unflatten(-1, (-1, 2)).contiguous())
    return torch.view_as_real(pairs * _broadcast(turn, x)).flatten(-2)


def rotate_half_split(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the pairs `(x_i, x_{i + d/2})` of `x [B, T, ..., d]` (the indexer's convention)."""
    cos, sin = _broadcast(cos, x), _broadcast(sin, x)
    first, second = x.chunk(2, dim=-1)
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


def _broadcast(table: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Insert head axes so a `[B, T, d/2]` table lines up with `x [B, T, (heads...), d]`."""
    return table.view(*table.shape[:2], *([1] * (x.dim() - 3)), table.shape[-1])
