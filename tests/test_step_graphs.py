"""Cached passes replayed as traced graphs (`jev.model.step_graphs`): exactly the eager pass's states
and cache at every number of sequences, tokens and keys one graph serves, on float32, fp16 and mixed
weights; the passes it must not replay run eagerly; a greedy generation, plain and speculative, writes
the same tokens; and the verify profile is keyed by it."""

import pytest
import torch

from jev.generate.drafters.autoregressive import AutoregressiveDrafter
from jev.generate.loop import generate
from jev.generate.profiles import machine_key
from jev.model.step_graphs import TRACE_AFTER
from jev.model.weights import fp16_available, store_weights
from tests.hardware import AUTO, needs_bfloat16_packing, weights_cases
from tests.test_weights import with_mlps_on_grid
from tests.tiny import MOE, random_model, tiny_config

# (sequences, tokens each pass extends by, prompt length): a plain step, verify passes, ragged batches.
PASSES = [(1, 1, 5), (1, 4, 9), (3, 1, 7), (3, 5, 12), (2, 8, 3)]
DENSE = (False,) * 3  # the graphs' key: no layer of the 3 selects


def _model(weights: str = "float32", **config):
    model = random_model(tiny_config(num_hidden_layers=3, **config))
    if weights != "float32":
        if not fp16_available(model):
            pytest.skip("fp16 weights need fbgemm")
        store_weights(with_mlps_on_grid(model), weights)
    return model


def _cached_passes(model, sequences: int, tokens: int, prompt: int, steps: int = 4):
    """States and logits of `steps` cached passes after a ragged prompt (row 0 the longest), and the
    cache after. The LM head runs outside the graph, in the form the pass kind says (mixed weights)."""
    generator = torch.Generator().manual_seed(sequences * 100 + tokens * 10 + prompt)
    cache = model.new_cache(sequences, prompt + steps * tokens)
    lengths = torch.randint(1, prompt + 1, (sequences,), generator=generator)
    lengths[0] = prompt
    ids = lambda width: torch.randint(0, model.config.vocab_size, (sequences, width), generator=generator)  # noqa: E731
    states = []
    with torch.no_grad():
        model.hidden_states(ids(prompt), cache=cache, lengths=lengths)
        for _ in range(steps):
            lengths = torch.randint(1, tokens + 1, (sequences,), generator=generator)
            lengths[0] = tokens
            hidden = model.hidden_states(ids(tokens), cache=cache, lengths=lengths)
            states.append(torch.cat((hidden, model.lm_head(hidden)), dim=-1))
    return states, cache


def _replays(model):
    """Count the graph's replays: wrap every traced graph in a counter."""
    calls = []
    for key, graph in list(model.step_graphs.graphs.items()):
        model.step_graphs.graphs[key] = lambda *inputs, graph=graph: calls.append(1) or graph(*inputs)
    return calls


@pytest.mark.parametrize("weights", weights_cases(["float32", "fp16", "mixed"]))
def test_replayed_passes_equal_eager_ones_exactly(weights):
    model = _model(weights)
    eager = [_cached_passes(model, *shape) for shape in PASSES]
    model.replay_cached_passes()
    calls = _replays(model)
    assert (torch.float32, True, DENSE) in model.step_graphs.graphs  # no indexer keys in these short caches
    for shape, (want_states, want_cache) in zip(PASSES, eager, strict=True):
        states, cache = _cached_passes(model, *shape)
        for got, want in zip(states, want_states, strict=True):
            assert torch.equal(got, want), shape
        assert torch.equal(cache.latent, want_cache.latent) and torch.equal(cache.lengths, want_cache.lengths)
    assert len(calls) == 4 * len(PASSES)  # every cached pass replayed, by the one graph traced at warm-up


def test_a_cache_with_indexer_keys_has_its_own_graph_and_selecting_passes_theirs():
    model = _model(index_topk=10)
    eager = _cached_passes(model, 2, 3, 6)  # 9 keys, then 12, 15 and 18 selected
    model.replay_cached_passes()
    assert set(model.step_graphs.graphs) == {(torch.float32, True, DENSE), (torch.float32, False, DENSE)}
    calls = _replays(model)
    states, cache = _cached_passes(model, 2, 3, 6)
    assert len(calls) == 1  # 9 keys replayed; 12 selected eagerly, then traced at 15 and replayed
    assert (torch.float32, False, (True,) * 3) in model.step_graphs.graphs
    for got, want in zip(states, eager[0], strict=True):
        assert torch.equal(got, want)
    assert torch.equal(cache.latent, eager[1].latent) and torch.equal(cache.index_keys, eager[1].index_keys)


@pytest.mark.parametrize("weights", ["float32", AUTO])  # AUTO: what `jev serve` stores here
def test_selecting_passes_replay_exactly_at_every_number_of_sequences_tokens_and_keys(weights):
    """Past a top-k of 4 every pass selects, ragged rows included (a short row's queries see fewer than
    k keys); one graph, traced at warm-up's first selecting passes, replays them all."""
    model = _model(weights, index_topk=4)
    eager = [_cached_passes(model, *shape) for shape in PASSES]
    model.replay_cached_passes()
    _cached_passes(model, 1, 1, 5, steps=TRACE_AFTER)
    selecting = (torch.float32, False, (True,) * 3)
    assert selecting in model.step_graphs.graphs
    calls = _replays(model)
    for shape, (want_states, want_cache) in zip(PASSES, eager, strict=True):
        states, cache = _cached_passes(model, *shape)
        for got, want in zip(states, want_states, strict=True):
            assert torch.equal(got, want), shape
        assert torch.equal(cache.latent, want_cache.latent) and torch.equal(cache.index_keys, want_cache.index_keys)
    assert len(calls) == 4 * len(PASSES)


@needs_bfloat16_packing
def test_mixed_weights_replay_a_few_sequences_and_not_the_bfloat16_blocks_of_many():
    model = _model("mixed")
    eager = _cached_passes(model, 8, 2, 5)
    model.replay_cached_passes()
    calls = _replays(model)
    states, _ = _cached_passes(model, 8, 2, 5)
    _cached_passes(model, 7, 2, 5)
    assert len(calls) == 4  # the 7 sequences' passes, none of the 8's
    for got, want in zip(states, eager[0], strict=True):
        assert torch.equal(got, want)


def test_training_passes_moe_layers_and_autograd_run_eagerly():
    model = _model()
    model.replay_cached_passes()
    calls = _replays(model)
    cache = model.new_cache(1, 8)
    model.hidden_states(torch.tensor([[1, 2, 3]]), cache=cache)
    assert model.hidden_states(torch.tensor([[4]]), cache=cache).requires_grad  # autograd on
    assert calls == []
    moe = random_model(tiny_config(num_hidden_layers=3, **MOE))
    moe.replay_cached_passes()
    assert not moe.step_graphs.graphs
    (want,), _ = _cached_passes(random_model(tiny_config(num_hidden_layers=3, **MOE)), 1, 1, 4, steps=1)
    (got,), _ = _cached_passes(moe, 1, 1, 4, steps=1)
    assert torch.equal(got, want)


def test_a_pass_kind_not_traced_yet_is_traced_the_second_time_it_is_seen():
    model = _model()
    model.replay_cached_passes()
    model.step_graphs.graphs.clear()
    model.step_graphs.seen.clear()
    _cached_passes(model, 1, 1, 3, steps=1)
    assert not model.step_graphs.graphs
    _cached_passes(model, 2, 3, 4, steps=1)
    assert list(model.step_graphs.graphs) == [(torch.float32, True, DENSE)]


@pytest.mark.parametrize("drafted", [False, True])
def test_greedy_generation_writes_the_same_tokens_replayed(drafted):
    model = _model(AUTO)
    prompts = [[5, 9, 2, 7], [4, 8, 1], [13, 1, 6, 10, 2, 3]]

    def run():
        drafter = AutoregressiveDrafter(random_model(tiny_config(num_hidden_layers=3))) if drafted else None
        out = generate(model, prompts, 12, temperature=0.0, drafter=drafter, draft_len=3)
        return out.tokens, out.stats.accepted

    want = run()
    model.replay_cached_passes()
    calls = _replays(model)
    assert run() == want
    assert calls


def test_the_verify_profile_is_keyed_by_replaying():
    model = _model()
    eager = machine_key(model)
    model.replay_cached_passes()
    assert machine_key(model) != eager
    model.replay_cached_passes(False)
    assert machine_key(model) == eager
