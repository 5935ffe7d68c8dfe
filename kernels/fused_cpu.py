"""Absorbed MLA through torch's fused scaled-dot-product attention: what runs off the GPU.

Why: `reference.mla_decode` spells the contract out in a dozen ops (a score product, a mask, a
masked softmax, its log-sum-exp, the value product), and a decode step runs it once per layer;
`reference.sparse_mla` gathers each query's top-k latents first. In the absorbed form every head
reads the same key and value, the latent cache, so the heads are query rows of one attention head
and one call to torch's fused attention computes them all, over the keys a boolean mask lets each
query see (its causal past, or the indexer's selection). The value is the whole cache row
`[latent ‖ rope key]` (as wide as the key, which the fused CPU kernel needs) and the rope part of
the output is dropped. A one-off probe on the shipped model's shapes (2 threads; the attention
benchmark, `benchmarks/attention.py`, times the parts): dense at batch 1 over 121 keys 63 -> 25
us, batch 16 of 8 tokens over 200 keys 2.4 -> 0.95 ms; top-256 of 400 keys at batch 1 160 -> 58
us, at batch 16 of 8 tokens 7.4 -> 1.9 ms. Past about a thousand keys the dense mask costs as much
as the gather (1,500 keys: 0.71 against 0.66 ms), so `ops` gathers there. The model reads only
the output: no log-sum-exp is computed.

Masked slots are never read for their value, but their scores are computed: they must be finite
numbers, as every slot of a `LatentCache` is (zero-filled, written only with computed latents).
"""

import torch
import torch.nn.functional as F


def mla_attention(
    q_latent: torch.Tensor, q_rope: torch.Tensor, kv_cache: torch.Tensor, visible: torch.Tensor, scale: float
) -> torch.Tensor:
    """Each query's attention over the keys `visible [B, T, L]` marks: `[B, T, H, d_c]`, zero for a
    query that sees none (the output of `reference.mla_decode` or `reference.sparse_mla`)."""
    size, length, heads, d_c = q_latent.shape
    query = torch.cat((q_latent, q_rope), dim=-1).view(size, 1, length * heads, -1)
    rows = visible.unsqueeze(2).expand(-1, -1, heads, -1).reshape(size, 1, length * heads, -1)
    shared = kv_cache.unsqueeze(1)
    out = F.scaled_dot_product_attention(query, shared, shared, attn_mask=rows, scale=scale)
    # torch's kernel gives zeros for a query that sees no key; the contract says so, so it is
    # enforced here rather than left to the kernel's version.
    return out.view(size, length, heads, -1)[..., :d_c].masked_fill(~visible.any(-1)[..., None, None], 0.0)
