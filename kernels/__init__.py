"""Attention kernels for MLA and DSA over the latent cache (installed as `jev.kernels`).

`ops` is what the model calls; `reference` holds the torch contracts; `backend` picks, per call,
the reference or the Triton kernel of the same contract (`triton_mla_decode`, `triton_indexer`,
`triton_sparse_mla`, sharing `triton_splitkv` and `triton_launch`). Only `ops`, `reference` and
`backend` are imported eagerly, so the package works where triton is not installed.
"""
