"""Cache cost accounting against DeepSeek-V3's published numbers."""

import pytest

from jev.model.config import ModelConfig
from jev.model.cost import cache_cost, decode_bytes_per_layer, dsa_crossover

DEEPSEEK_V3_671B = ModelConfig(
    vocab_size=129280, hidden_size=7168, intermediate_size=18432, num_hidden_layers=61, num_attention_heads=128,
    q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
    index_n_heads=64, index_head_dim=128, index_topk=2048, first_k_dense_replace=3, moe_intermediate_size=2048,
    n_routed_experts=256, n_shared_experts=1, num_experts_per_tok=8, n_group=8, topk_group=4,
    routed_scaling_factor=2.5, max_position_embeddings=163840,
)


def test_deepseek_v3_cache_is_576_elements_and_57x_smaller_than_mha():
    cost = cache_cost(DEEPSEEK_V3_671B)
    assert cost.mla == 576
    assert cost.mha == 32768
    assert cost.mha_over_mla == pytest.approx(56.9, abs=0.05)
    assert cost.naive_over_mla == pytest.approx(71.1, abs=0.05)
    assert cost.bytes(2)["mla"] == 1152


def test_decode_bytes_grow_with_context_and_dsa_caps_the_latent_read():
    small = decode_bytes_per_layer(DEEPSEEK_V3_671B, 1024, 2)
    large = decode_bytes_per_layer(DEEPSEEK_V3_671B, 131072, 2)
    assert small["mla_dense"] == 1024 * 576 * 2
    assert small["mla_dsa"] == (1024 * 128 + 1024 * 576) * 2, "below k every latent is still read"
    assert large["mla_dsa"] == (131072 * 128 + 2048 * 576) * 2
    assert large["mla_dense"] / large["mla_dsa"] == pytest.approx(576 * 131072 / (128 * 131072 + 2048 * 576))


def test_crossover_is_where_dense_and_sparse_bytes_meet():
    crossover = dsa_crossover(DEEPSEEK_V3_671B)
    below = decode_bytes_per_layer(DEEPSEEK_V3_671B, int(crossover) - 1, 2)
    above = decode_bytes_per_layer(DEEPSEEK_V3_671B, int(crossover) + 2, 2)
    assert below["mla_dsa"] > below["mla_dense"]
    assert above["mla_dsa"] < above["mla_dense"]
