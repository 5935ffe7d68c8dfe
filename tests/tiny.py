"""Tiny DeepSeek-V3.2 configs, randomly initialised models and a small tokenizer, for tests that build
their own models (fixtures over them live in conftest.py)."""

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from jev.model import Model, ModelConfig

TINY = dict(
    vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
    index_n_heads=8, index_head_dim=16, index_topk=4096, max_position_embeddings=512,
)
MOE = dict(
    first_k_dense_replace=1, n_routed_experts=8, n_group=2, topk_group=1, num_experts_per_tok=2,
    moe_intermediate_size=24, routed_scaling_factor=2.5,
)
YARN = dict(
    rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128, "mscale": 1.0,
                  "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1},
)


def tiny_config(**overrides) -> ModelConfig:
    return ModelConfig(**{**TINY, **overrides})


def random_model(config: ModelConfig, seed: int = 0) -> Model:
    """Weights drawn wider than a fresh init so attention is far from uniform and bugs show."""
    torch.manual_seed(seed)
    model = Model(config)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(std=0.2)
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.normal_(std=0.1)
    return model.eval()


def rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Max abs error relative to the reference's scale."""
    return float((actual - expected).abs().max() / expected.abs().max())


def tiny_tokenizer() -> Tokenizer:
    """A byte-level BPE of 400 ids with Jev's special tokens, trained on a few sentences."""
    text = ["Win a free cruise now!", "Meeting moved to Tuesday, see agenda.", "Re: patch for the kernel build"]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<bos>", "<eos>", "<pad>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(text * 20, trainer)
    return tokenizer


def with_subjects(source: Path, target: Path) -> Path:
    """The fixture rows with a subject line beside the label, as the mail data keeps it."""
    rows = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    for row in rows:
        row["subject"] = ("Re: " if row["label"]["reply"] else "") + " ".join(row["input"]["body"].split()[:2])
    target.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return target
