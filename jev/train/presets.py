"""Model architectures training starts from: the shipped default and a tiny one for tests."""

from jev.model import ModelConfig

# The shipped default: a small all-dense DeepSeek-V3.2 (MLA + DSA) that trains on one machine.
DEFAULT_MODEL_CONFIG = ModelConfig(
    vocab_size=8192,
    hidden_size=256,
    intermediate_size=640,
    num_hidden_layers=4,
    num_attention_heads=4,
    q_lora_rank=64,
    kv_lora_rank=64,
    qk_nope_head_dim=32,
    qk_rope_head_dim=16,
    v_head_dim=32,
    index_n_heads=4,
    index_head_dim=16,
    index_topk=64,
    first_k_dense_replace=4,
    max_position_embeddings=4096,
    pad_token_id=2,
)

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
