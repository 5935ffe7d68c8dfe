"""The source model itself, run in torch: the teacher a conversion is measured and healed against.

A plain Llama forward (grouped-query attention, interleaved RoPE, SwiGLU) over a `LlamaSource`'s
weights. Besides logits it can return every layer's residual input and attention output, which is
what the closed-form conversion's statistics and the layer-wise attention transfer read.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from jev.convert.source import LlamaSource, SourceConfig


@dataclass
class LayerTrace:
    """One layer's view of a forward pass: residual input `[B, T, D]` and attention output `[B, T, D]`."""

    residual: torch.Tensor
    attention: torch.Tensor


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate adjacent pairs of `x [B, H, T, d]` by angles `[T, d / 2]`."""
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, odd * cos + even * sin), dim=-1).flatten(-2)


class LlamaTeacher(nn.Module):
    """`forward(input_ids [B, T]) -> logits [B, T, V]`; `trace=True` also returns one `LayerTrace` per layer."""

    def __init__(self, source: LlamaSource) -> None:
        super().__init__()
        self.config: SourceConfig = source.config
        self.weights = nn.ParameterDict(
            {name.replace(".", "__"): nn.Parameter(t, requires_grad=False) for name, t in source.weights.items()}
        )

    def w(self, name: str) -> torch.Tensor:
        return self.weights[name.replace(".", "__")]

    def rope_tables(self, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        cfg = self.config
        inv_freq = cfg.rope_theta ** (-torch.arange(0, cfg.head_dim, 2, device=device).float() / cfg.head_dim)
        angles = torch.arange(length, device=device).float().unsqueeze(1) * inv_freq
        return angles.cos(), angles.sin()

    def attention(self, layer: int, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Grouped-query causal attention of the already-normed `x [B, T, D]`, after `o_proj`."""
        cfg, prefix = self.config, f"model.layers.{layer}.self_attn."
        size, length, _ = x.shape
        q = F.linear(x, self.w(prefix + "q_proj.weight")).view(size, length, cfg.num_attention_heads, -1)
        k = F.linear(x, self.w(prefix + "k_proj.weight")).view(size, length, cfg.num_key_value_heads, -1)
        v = F.linear(x, self.w(prefix + "v_proj.weight")).view(size, length, cfg.num_key_value_heads, -1)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        q, k = rotate_pairs(q, cos, sin), rotate_pairs(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return F.linear(out.transpose(1, 2).reshape(size, length, -1), self.w(prefix + "o_proj.weight"))

    def forward(self, input_ids: torch.Tensor, trace: bool = False):
        cfg = self.config
        x = F.embedding(input_ids, self.w("model.embed_tokens.weight"))
        cos, sin = self.rope_tables(input_ids.shape[1], x.device)
        traces = []
        for i in range(cfg.num_hidden_layers):
            prefix = f"model.layers.{i}."
            attention = self.attention(i, rms_norm(x, self.w(prefix + "input_layernorm.weight"), cfg.rms_norm_eps),
                                       cos, sin)
            if trace:
                traces.append(LayerTrace(x, attention))
            x = x + attention
            h = rms_norm(x, self.w(prefix + "post_attention_layernorm.weight"), cfg.rms_norm_eps)
            gate = F.linear(h, self.w(prefix + "mlp.gate_proj.weight"))
            up = F.linear(h, self.w(prefix + "mlp.up_proj.weight"))
            x = x + F.linear(F.silu(gate) * up, self.w(prefix + "mlp.down_proj.weight"))
        x = rms_norm(x, self.w("model.norm.weight"), cfg.rms_norm_eps)
        head = self.w("model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight")
        logits = F.linear(x, head)
        return (logits, traces) if trace else logits
