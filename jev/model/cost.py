"""KV-cache cost accounting: what each attention scheme stores per token and reads per decode step.

These are the numbers the MLA and DSA papers argue with, written as code so the benchmark can set
measured times against them (a roofline) and the tests can pin them to DeepSeek-V3's published
figures (576 elements per token per layer; 56.9x less than same-size MHA).
"""

from dataclasses import dataclass

from jev.model.config import ModelConfig


@dataclass(frozen=True)
class CacheCost:
    """Elements per token per layer for each scheme, at one set of model dimensions."""

    mha: int
    naive_mla: int
    mla: int
    indexer_key: int

    def bytes(self, bytes_per_element: int) -> dict[str, int]:
        return {name: value * bytes_per_element for name, value in self.__dict__.items()}

    @property
    def mha_over_mla(self) -> float:
        return self.mha / self.mla

    @property
    def naive_over_mla(self) -> float:
        return self.naive_mla / self.mla


def cache_cost(config: ModelConfig) -> CacheCost:
    """MHA `2 H d_h` (d_h = qk_nope, the paper's convention), DeepSeek's naive cache `H (d_n + d_r + d_v)`,
    MLA `kv_lora_rank + qk_rope`, and the DSA indexer key `index_head_dim`."""
    heads = config.num_attention_heads
    return CacheCost(
        mha=2 * heads * config.qk_nope_head_dim,
        naive_mla=heads * (config.qk_nope_head_dim + config.qk_rope_head_dim + config.v_head_dim),
        mla=config.kv_lora_rank + config.qk_rope_head_dim,
        indexer_key=config.index_head_dim,
    )


def decode_bytes_per_layer(config: ModelConfig, context: int, bytes_per_element: int) -> dict[str, int]:
    """Cache bytes one decode step reads per layer at context L: dense MLA reads every latent; MLA + DSA
    reads every indexer key, then only `min(L, index_topk)` latents."""
    cost = cache_cost(config)
    selected = min(context, config.index_topk)
    return {
        "mha": context * cost.mha * bytes_per_element,
        "mla_dense": context * cost.mla * bytes_per_element,
        "mla_dsa": (context * cost.indexer_key + selected * cost.mla) * bytes_per_element,
    }


def dsa_crossover(config: ModelConfig) -> float:
    """The context above which DSA reads fewer cache bytes than dense MLA: `k * B_mla / (B_mla - B_idx)`."""
    cost = cache_cost(config)
    if cost.indexer_key >= cost.mla:
        return float("inf")
    return config.index_topk * cost.mla / (cost.mla - cost.indexer_key)
