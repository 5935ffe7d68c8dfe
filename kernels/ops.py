"""The attention ops the model calls.

Every op here has one contract, written down in `jev.kernels.reference`. The model imports these
names and nothing else, so the Triton kernels of the same contracts are dispatched here without
the model changing. `jev.kernels.backend` picks per call: Triton for CUDA tensors, the torch
reference elsewhere, or whatever `JEV_KERNELS` / `backend.use_backend(...)` forces. Top-k
selection and the causal mask always run in torch (`torch.topk` is fast enough next to the scoring).
"""

import torch
from jev.kernels import reference
from jev.kernels.backend import triton_module, use_triton
from jev.kernels.reference import causal_key_mask, select_topk

__all__ = ["causal_key_mask", "indexer_logits", "mla_decode", "select_topk", "sparse_mla"]


def mla_decode(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    kv_cache: torch.Tensor,
    q_positions: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense absorbed MLA over the latent cache: `[B, T, H, d_c]` output and `[B, T, H]` lse (see reference)."""
    if use_triton(kv_cache):
        return triton_module("triton_mla_decode").mla_decode(q_latent, q_rope, kv_cache, q_positions, scale)
    return reference.mla_decode(q_latent, q_rope, kv_cache, q_positions, scale)


def indexer_logits(
    q: torch.Tensor,
    weights: torch.Tensor,
    k_cache: torch.Tensor,
    q_positions: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """DSA index scores, float32 `[B, T, L]` with -inf where not causal (see reference)."""
    if use_triton(k_cache):
        return triton_module("triton_indexer").indexer_logits(q, weights, k_cache, q_positions, scale)
    return reference.indexer_logits(q, weights, k_cache, q_positions, scale)


def sparse_mla(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Absorbed MLA over each query's top-k slots (`-1` unused): `[B, T, H, d_c]` and lse (see reference)."""
    if use_triton(kv_cache):
        return triton_module("triton_sparse_mla").sparse_mla(q_latent, q_rope, kv_cache, indices, scale)
    return reference.sparse_mla(q_latent, q_rope, kv_cache, indices, scale)
