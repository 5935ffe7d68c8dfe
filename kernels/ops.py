"""The attention ops the model calls.

Every op here has one contract, written down in `jev.kernels.reference`. The model imports these
names and nothing else, so a faster implementation of the same contract (the Triton kernels) can
be dispatched here without the model changing.
"""

from jev.kernels.reference import causal_key_mask, indexer_logits, mla_decode, select_topk, sparse_mla

__all__ = ["causal_key_mask", "indexer_logits", "mla_decode", "select_topk", "sparse_mla"]
