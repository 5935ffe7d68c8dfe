"""The latent cache: absorbed decode against expanded attention, appends, padding and rollback."""

import pytest
import torch

from jev.model import CacheFullError
from jev.model.mla import AttentionBatch
from tests.tiny import random_model, rel_err, tiny_config

IDS = torch.randint(0, 97, (3, 72), generator=torch.Generator().manual_seed(0))


def full_logits(model, ids):
    with torch.no_grad():
        return model(ids)


@pytest.mark.slow
@pytest.mark.parametrize("index_topk", [4096, 24])
def test_incremental_decoding_equals_full_forward(index_topk):
    model = random_model(tiny_config(index_topk=index_topk))
    cache = model.new_cache(3, 80)
    with torch.no_grad():
        steps = [model(IDS[:, :36], cache=cache)]
        steps += [model(IDS[:, t : t + 1], cache=cache) for t in range(36, 72)]
    assert rel_err(torch.cat(steps, dim=1), full_logits(model, IDS)) <= 1e-5
    assert cache.lengths.tolist() == [72, 72, 72]


def test_absorbed_attention_equals_expanded_attention_over_32_steps():
    """One MLA layer, same weights and inputs: the absorbed form over the cache vs the expanded form."""
    model = random_model(tiny_config())
    attn = model.backbone.layers[0].self_attn
    x = torch.randn(2, 40, 64, generator=torch.Generator().manual_seed(1))
    positions = torch.arange(40).expand(2, 40)
    cos, sin = model.backbone.rotary(positions, x.dtype)
    with torch.no_grad():
        expanded = attn(x, AttentionBatch(positions, cos, sin, 40, None, expanded=True))
        cache = model.new_cache(2, 40)
        prefill = AttentionBatch(positions[:, :8], cos[:, :8], sin[:, :8], 8, cache, expanded=True)
        outputs = [attn(x[:, :8], prefill)]
        cache.advance(torch.tensor([8, 8]))
        for t in range(8, 40):
            step = AttentionBatch(positions[:, t : t + 1], cos[:, t : t + 1], sin[:, t : t + 1], t + 1, cache, False)
            outputs.append(attn(x[:, t : t + 1], step))
            cache.advance(torch.tensor([1, 1]))
    assert rel_err(torch.cat(outputs, dim=1), expanded) <= 1e-5


def test_multi_token_appends_equal_one_at_a_time(tiny_model):
    chunked, single = tiny_model.new_cache(3, 72), tiny_model.new_cache(3, 72)
    with torch.no_grad():
        tiny_model(IDS[:, :30], cache=chunked)
        tiny_model(IDS[:, :30], cache=single)
        block = tiny_model(IDS[:, 30:35], cache=chunked)
        one = torch.cat([tiny_model(IDS[:, t : t + 1], cache=single) for t in range(30, 35)], dim=1)
    assert rel_err(block, one) <= 1e-5


def test_truncate_then_reappend_equals_never_appending(tiny_model):
    clean, rolled = tiny_model.new_cache(3, 72), tiny_model.new_cache(3, 72)
    junk = torch.randint(0, 97, (3, 6), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        tiny_model(IDS[:, :40], cache=clean)
        tiny_model(IDS[:, :40], cache=rolled)
        tiny_model(junk, cache=rolled)
        rolled.truncate([40, 40, 40])
        expected = tiny_model(IDS[:, 40:44], cache=clean)
        actual = tiny_model(IDS[:, 40:44], cache=rolled)
    assert rel_err(actual, expected) <= 1e-6


@pytest.mark.parametrize("index_topk", [4096, 8])
def test_padding_never_changes_a_sequence(index_topk):
    """Sequences of different lengths in one batch, prefilled then decoded, against each run alone."""
    model = random_model(tiny_config(index_topk=index_topk))
    lengths = [30, 17, 25]
    padded = IDS[:, :30].clone()
    for row, n in enumerate(lengths):
        padded[row, n:] = 96
    cache = model.new_cache(3, 40)
    with torch.no_grad():
        prefill = model(padded, cache=cache, lengths=torch.tensor(lengths))
        step = model(IDS[:, 50:52], cache=cache)
        for row, n in enumerate(lengths):
            alone = model(torch.cat([IDS[row : row + 1, :n], IDS[row : row + 1, 50:52]], dim=1))
            assert rel_err(prefill[row, :n], alone[0, :n]) <= 1e-5
            assert rel_err(step[row], alone[0, n:]) <= 1e-5
    assert cache.lengths.tolist() == [32, 19, 27]


def test_cache_refuses_overflow_and_bad_truncation(tiny_model):
    cache = tiny_model.new_cache(1, 8)
    with torch.no_grad():
        tiny_model(IDS[:1, :6], cache=cache)
        with pytest.raises(CacheFullError, match="holds 8"):
            tiny_model(IDS[:1, :3], cache=cache)
    with pytest.raises(ValueError, match="within"):
        cache.truncate([7])
    with pytest.raises(ValueError, match="needs 1 lengths"):
        cache.truncate([1, 2])


def test_cache_holds_only_latent_rope_key_and_indexer_key_and_the_keys_only_where_a_pass_can_select():
    model = random_model(tiny_config(index_topk=12))
    cfg = model.config
    cache = model.new_cache(2, 16)
    assert cache.latent.shape == (cfg.num_hidden_layers, 2, 16, cfg.kv_lora_rank + cfg.qk_rope_head_dim)
    assert cache.index_keys.shape == (cfg.num_hidden_layers, 2, 16, cfg.index_head_dim)
    short = model.new_cache(2, 12)
    assert short.index_keys is None
    with torch.no_grad():
        logits = [model(IDS[:2, :12], cache=c) for c in (cache, short)]
    assert torch.equal(logits[0], logits[1]), "no pass over 12 keys selects, so the keys are never read"
    keyless = model.new_cache(2, 12)
    with torch.no_grad():
        model(IDS[:2, :6], cache=keyless)
        with model.selecting(4), pytest.raises(ValueError, match="without indexer keys"):
            model(IDS[:2, 6:7], cache=keyless)
