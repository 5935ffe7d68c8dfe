"""Llama -> DeepSeek-V3.2 conversion on tiny random Llama models: the exact cases are exact, the rest close.

transformers' `LlamaForCausalLM` is the reference for the source, and its `DeepseekV32ForCausalLM`
for the converted folder.
"""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from jev.convert.closed_form import MLARanks, collect_statistics, convert
from jev.convert.llama import LlamaTeacher
from jev.convert.source import half_split_to_interleaved, read_llama_folder
from jev.tokenizer import save_tokenizer
from jev.train.tokenizer import train_tokenizer
from tests.tiny import rel_err

VOCAB = 320


def tiny_llama(folder, kv_heads: int = 1, eps: float = 1e-12, seed: int = 0) -> LlamaForCausalLM:
    """A random 2-layer Llama (hidden 64, 4 heads of 16) saved with a tokenizer in `folder`."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=kv_heads, rms_norm_eps=eps, max_position_embeddings=256, tie_word_embeddings=True,
        rope_theta=10000.0,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for layer in model.model.layers:  # gains away from 1, so folding them is tested
            layer.input_layernorm.weight.uniform_(0.5, 1.5)
            layer.post_attention_layernorm.weight.uniform_(0.5, 1.5)
    model.save_pretrained(folder)
    save_tokenizer(train_tokenizer(["the quick brown fox jumps over the lazy dog"] * 4, VOCAB), folder)
    return model


def ids(length: int = 40, batch: int = 2, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def reference(model: LlamaForCausalLM, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(tokens).logits


def converted(folder, ranks: MLARanks, dtype=torch.float32):
    source = read_llama_folder(folder)
    statistics = collect_statistics(LlamaTeacher(source), ids(64, 4, seed=7))
    return convert(source, ranks, statistics).to(dtype)


EXACT = MLARanks(kv_lora_rank=64, qk_rope_head_dim=16, rope_stride=1, index_n_heads=2, index_head_dim=16,
                 index_topk=4096)


def test_half_split_to_interleaved_pairs_rows():
    weight = torch.arange(4.0).repeat(2).unsqueeze(1)  # two heads of 4 rows: pairs (0, 2), (1, 3)
    assert half_split_to_interleaved(weight, 4).squeeze(1).tolist() == [0, 2, 1, 3, 0, 2, 1, 3]


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_teacher_equals_transformers_llama(kv_heads, tmp_path):
    model = tiny_llama(tmp_path, kv_heads=kv_heads)
    teacher = LlamaTeacher(read_llama_folder(tmp_path))
    tokens = ids()
    with torch.no_grad():
        assert rel_err(teacher(tokens), reference(model, tokens)) <= 1e-5


def test_exact_case_equals_the_source(tmp_path):
    """One KV head, every frequency rotary, full latent rank: MLA computes the source's attention."""
    model = tiny_llama(tmp_path)
    tokens = ids()
    with torch.no_grad():
        assert rel_err(converted(tmp_path, EXACT)(tokens), reference(model, tokens)) <= 1e-5
        assert rel_err(converted(tmp_path, EXACT, torch.float64)(tokens.clone()), reference(model, tokens)) <= 1e-5


@pytest.mark.slow
def test_exact_case_absorbed_decode_equals_the_source(tmp_path):
    model = tiny_llama(tmp_path)
    mla = converted(tmp_path, EXACT)
    tokens = ids(24, 1)
    cache = mla.new_cache(1, 24)
    with torch.no_grad():
        steps = [mla(tokens[:, :4], cache=cache)] + [mla(tokens[:, t : t + 1], cache=cache) for t in range(4, 24)]
    assert rel_err(torch.cat(steps, dim=1), reference(model, tokens)) <= 1e-5


@pytest.mark.parametrize(
    "change",
    ["two KV heads", "latent below hidden", "every other frequency dropped"],
)
@pytest.mark.slow
def test_each_approximation_moves_the_logits(change, tmp_path):
    """The controls: each departure from the exact case must show, or the exact test proves nothing."""
    ranks = EXACT
    kv_heads = 2 if change == "two KV heads" else 1
    if change == "latent below hidden":
        ranks = MLARanks(**{**EXACT.to_dict(), "kv_lora_rank": 24})
    if change == "every other frequency dropped":
        ranks = MLARanks(**{**EXACT.to_dict(), "qk_rope_head_dim": 8, "rope_stride": 2})
    model = tiny_llama(tmp_path, kv_heads=kv_heads)
    tokens = ids()
    with torch.no_grad():
        error = rel_err(converted(tmp_path, ranks)(tokens), reference(model, tokens))
    assert 1e-4 < error < 1.0


def test_dropping_the_scale_factor_breaks_the_exact_case(tmp_path):
    model = tiny_llama(tmp_path)
    mla = converted(tmp_path, EXACT)
    for layer in mla.backbone.layers:
        layer.self_attn.scale /= 2**0.5  # as if q_b's rows lacked sqrt((d_nope + d_rope) / d_head) = sqrt(2)
    tokens = ids()
    with torch.no_grad():
        assert rel_err(mla(tokens), reference(model, tokens)) > 1e-3
