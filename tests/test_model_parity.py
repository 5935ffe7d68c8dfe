"""Jev's logits against transformers' DeepseekV32ForCausalLM on the same weights."""

import pytest
import torch
from transformers import DeepseekV32ForCausalLM

from jev.model import Model
from tests.tiny import MOE, YARN, random_model, rel_err, tiny_config

TOL = 1e-4
# An indexer score is exactly 0 when every head's ReLU is; such ties at the top-k boundary may be
# broken either way (torch.topk gives no order, Jev prefers earlier keys), so the reference
# comparisons use enough indexer heads that an all-negative key is vanishingly rare.
NO_TIES = dict(index_n_heads=32)


def reference_logits(folder, ids: torch.Tensor) -> torch.Tensor:
    hf = DeepseekV32ForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        return hf(ids).logits


CASES = {
    "dense": (tiny_config(), 64),
    "moe": (tiny_config(**MOE), 64),
    "dsa_topk_below_length": (tiny_config(index_topk=32, **NO_TIES), 220),
    "dsa_topk_above_length": (tiny_config(index_topk=300), 220),
    "yarn": (tiny_config(**YARN, index_topk=48, **NO_TIES), 200),
}


@pytest.mark.parametrize("case", list(CASES))
def test_logits_match_transformers(case, tmp_path):
    config, length = CASES[case]
    model = random_model(config)
    model.save_pretrained(tmp_path)
    ids = torch.randint(0, config.vocab_size, (2, length), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = model(ids)
    assert rel_err(ours, reference_logits(tmp_path, ids)) <= TOL


def test_checkpoint_written_by_transformers_loads_with_same_logits(tmp_path):
    config = tiny_config(**MOE, index_topk=16, **NO_TIES)
    random_model(config).save_pretrained(tmp_path / "jev")
    hf = DeepseekV32ForCausalLM.from_pretrained(tmp_path / "jev", dtype=torch.float32).eval()
    hf.save_pretrained(tmp_path / "hf", max_shard_size="100KB")
    assert (tmp_path / "hf" / "model.safetensors.index.json").exists(), "expected a sharded checkpoint"
    ids = torch.randint(0, config.vocab_size, (1, 80), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours = Model.from_pretrained(tmp_path / "hf")(ids)
        theirs = hf(ids).logits
    assert rel_err(ours, theirs) <= TOL


@pytest.mark.slow
@pytest.mark.parametrize("sparse", [False, True])
def test_wrong_softmax_scale_breaks_parity(sparse, tmp_path):
    """The absorbed dot product is kv_lora_rank + qk_rope long; scaling by that length is the classic bug."""
    config = tiny_config(index_topk=16 if sparse else 4096, **NO_TIES)
    model = random_model(config)
    model.save_pretrained(tmp_path)
    ids = torch.randint(0, config.vocab_size, (1, 48), generator=torch.Generator().manual_seed(3))
    reference = reference_logits(tmp_path, ids)

    def decode_all() -> torch.Tensor:
        cache = model.new_cache(1, 48)
        with torch.no_grad():
            first = model(ids[:, :8], cache=cache)
            rest = [model(ids[:, t : t + 1], cache=cache) for t in range(8, 48)]
        return torch.cat([first, *rest], dim=1)

    assert rel_err(decode_all(), reference) <= TOL
    for layer in model.backbone.layers:
        layer.self_attn.scale = (config.kv_lora_rank + config.qk_rope_head_dim) ** -0.5
    assert rel_err(decode_all(), reference) > 10 * TOL
