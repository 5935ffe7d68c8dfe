"""Attention kernels for MLA and DSA over the latent cache (installed as `jev.kernels`).

`ops` is what the model calls; `reference` holds the torch contracts; `backend` picks, per call,
torch or the Triton kernel of the same contract (`triton_mla_decode`, `triton_indexer`,
`triton_sparse_mla`, sharing `triton_splitkv` and `triton_launch`); in torch the attention runs
through its fused kernel (`fused_cpu`) and the indexer as the reference. Only `ops`, `reference`,
`fused_cpu` and `backend` are imported eagerly, so the package works where triton is not installed.
"""
