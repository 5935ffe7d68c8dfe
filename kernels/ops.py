"""The attention ops the model calls.

Every op here has one contract, written down in `jev.kernels.reference`. The model imports these
names and nothing else, so the Triton kernels of the same contracts are dispatched here without
the model changing. `jev.kernels.backend` picks per call: Triton for half-precision CUDA tensors, torch
elsewhere (the attention through torch's fused kernel, `fused_cpu`; the indexer as the reference),
or whatever `JEV_KERNELS` / `backend.use_backend(...)` forces. The model reads only the attention's
output, never its log-sum-exp. Top-k selection and the causal mask always run in torch
(`torch.topk` is fast enough next to the scoring).
"""

import torch
from jev.kernels import fused_cpu, reference
from jev.kernels.backend import triton_module, use_triton
from jev.kernels.reference import causal_key_mask, select_topk, selected_key_mask, top_key_mask

# Up to this many keys a selection costs less as a masked dense fused attention than gathered
# (`fused_cpu`: equal near 1,500 keys on 2 threads).
FUSED_SPARSE_MAX_KEYS = 1024

__all__ = [
    "causal_key_mask", "indexer_logits", "mla_attention", "reads_selection_mask", "select_topk", "selected_key_mask",
    "sparse_mla_attention", "top_key_mask",
]


def mla_attention(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    kv_cache: torch.Tensor,
    q_positions: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Dense absorbed MLA over the latent cache: the `[B, T, H, d_c]` output of `reference.mla_decode`.

    Off the GPU it runs as one fused attention call (`fused_cpu`); the model never reads the lse."""
    if use_triton(kv_cache):
        return triton_module("triton_mla_decode").mla_decode(q_latent, q_rope, kv_cache, q_positions, scale)[0]
    visible = causal_key_mask(q_positions, kv_cache.shape[1])
    return fused_cpu.mla_attention(q_latent, q_rope, kv_cache, visible, scale)


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


def reads_selection_mask(kv_cache: torch.Tensor) -> bool:
    """Whether `sparse_mla_attention` over `kv_cache` reads a selection as a mask: off the GPU, up to
    FUSED_SPARSE_MAX_KEYS keys. A caller that makes the mask directly has no indices to order."""
    return not use_triton(kv_cache) and kv_cache.shape[1] <= FUSED_SPARSE_MAX_KEYS


def sparse_mla_attention(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    kv_cache: torch.Tensor,
    selection: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Absorbed MLA over each query's selected keys, the `[B, T, H, d_c]` output of `reference.sparse_mla`:
    `selection` is the top-k slots `[B, T, k]` (`-1` unused), or where `reads_selection_mask`, their
    mask `[B, T, L]`.

    Off the GPU, up to FUSED_SPARSE_MAX_KEYS keys it runs as one fused attention call masked to the
    selection (`fused_cpu`), past them by gathering the selected latents (the reference)."""
    if selection.dtype == torch.bool:
        if not reads_selection_mask(kv_cache):
            raise ValueError(f"a selection over {kv_cache.shape[1]} keys on {kv_cache.device} is read as indices")
        return fused_cpu.mla_attention(q_latent, q_rope, kv_cache, selection, scale)
    if use_triton(kv_cache):
        return triton_module("triton_sparse_mla").sparse_mla(q_latent, q_rope, kv_cache, selection, scale)[0]
    if kv_cache.shape[1] <= FUSED_SPARSE_MAX_KEYS:
        visible = selected_key_mask(selection, kv_cache.shape[1])
        return fused_cpu.mla_attention(q_latent, q_rope, kv_cache, visible, scale)
    return reference.sparse_mla(q_latent, q_rope, kv_cache, selection, scale)[0]
