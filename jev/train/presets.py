"""Model architectures `jev train lm` starts from: the default (ModelConfig's own) and a tiny one for tests."""

from jev.model import ModelConfig

# The architecture `jev train lm` pretrains from scratch, ModelConfig's own defaults: a small
# all-dense DeepSeek-V3.2 (MLA + DSA) that trains on one machine. (The shipped model is not one:
# it is SmolLM2-135M converted by `jev convert`.)
DEFAULT_MODEL_CONFIG = ModelConfig()

# Small enough that a test trains it for dozens of steps in about a second.
TINY_TEST_CONFIG = ModelConfig(
    vocab_size=512,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    q_lora_rank=16,
    kv_lora_rank=16,
    qk_nope_head_dim=8,
    qk_rope_head_dim=8,
    v_head_dim=8,
    index_n_heads=2,
    index_head_dim=8,
    index_topk=8,
    first_k_dense_replace=2,
    max_position_embeddings=256,
    pad_token_id=2,
)

PRESETS = {"default": DEFAULT_MODEL_CONFIG, "tiny": TINY_TEST_CONFIG}
