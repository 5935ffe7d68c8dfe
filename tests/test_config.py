"""`ModelConfig` reads and writes transformers' DeepSeek-V3.2 config.json and refuses what it cannot honour."""

import json

import pytest
from transformers import DeepseekV32Config

from jev.model.config import ConfigError, ModelConfig
from tests.tiny import MOE, YARN, tiny_config

# The published DeepSeek-V3.2-Exp config.json, in the old `rope_scaling` spelling.
DEEPSEEK_V32_EXP = {
    "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "vocab_size": 129280,
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_nextn_predict_layers": 1, "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1,
    "n_routed_experts": 256, "ep_size": 1, "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "topk_method": "noaux_tc", "n_group": 8,
    "topk_group": 4, "num_experts_per_tok": 8, "moe_layer_freq": 1, "first_k_dense_replace": 3,
    "norm_topk_prob": True, "scoring_func": "sigmoid", "hidden_act": "silu", "max_position_embeddings": 163840,
    "initializer_range": 0.02, "rms_norm_eps": 1e-06, "use_cache": True, "bos_token_id": 0, "eos_token_id": 1,
    "tie_word_embeddings": False, "rope_theta": 10000, "attention_bias": False, "attention_dropout": 0.0,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048, "torch_dtype": "bfloat16",
}


def test_reads_the_published_deepseek_v32_config():
    config = ModelConfig.from_dict(DEEPSEEK_V32_EXP)
    assert config.mlp_layer_types == ["dense"] * 3 + ["sparse"] * 58
    assert config.rope_type == "yarn" and config.rope_scaling["factor"] == 40
    assert config.index_topk == 2048 and config.qk_head_dim == 192


@pytest.mark.parametrize("extra", [{}, MOE, YARN])
def test_round_trip_through_json_and_transformers(extra, tmp_path):
    config = tiny_config(**extra)
    config.save(tmp_path)
    assert ModelConfig.load(tmp_path) == config
    theirs = DeepseekV32Config.from_pretrained(tmp_path)
    for name in ("hidden_size", "kv_lora_rank", "index_topk", "index_head_dim", "mlp_layer_types", "n_group"):
        assert getattr(theirs, name) == getattr(config, name), name
    assert theirs.rope_parameters["rope_type"] == config.rope_type


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"made_up_key": 1}, "made_up_key"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"attention_bias": True}, "attention_bias"),
        ({"num_key_value_heads": 8}, "num_key_value_heads"),
        ({"q_lora_rank": None}, "q_lora_rank"),
        ({"quantization_config": {"quant_method": "fp8"}}, "quantization_config"),
        ({"index_head_dim": 32}, "index_head_dim"),
        ({"n_group": 7}, "n_group"),
        ({"topk_group": 9}, "topk_group"),
        ({"num_experts_per_tok": 200}, "num_experts_per_tok"),
        ({"mlp_layer_types": ["dense"]}, "mlp_layer_types"),
        ({"rope_scaling": {"type": "longrope", "factor": 2}}, "rope_type"),
        ({"rope_scaling": {"type": "yarn", "original_max_position_embeddings": 4096}}, "factor"),
        ({"kv_lora_rank": 0}, "kv_lora_rank"),
    ],
)
def test_refuses_unknown_or_contradictory_values_naming_the_field(change, message):
    with pytest.raises(ConfigError, match=message):
        ModelConfig.from_dict({**DEEPSEEK_V32_EXP, **change})


def test_load_reports_a_missing_or_broken_file(tmp_path):
    with pytest.raises(ConfigError, match=r"no config\.json"):
        ModelConfig.load(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        ModelConfig.load(tmp_path)


def test_written_config_is_plain_sorted_json(tmp_path):
    tiny_config().save(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["model_type"] == "deepseek_v32" and raw["rope_parameters"]["rope_type"] == "default"
