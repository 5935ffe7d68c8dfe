"""Field queries that join at a higher layer: the batched pass equals a row-by-row reference, the
cached lower states give the same logits, the last layer run for the field rows alone gives what
the full pass gives them, and the cache a decision leaves is a plain prefill."""

import pytest
import torch

from jev.decide.decision import DecisionModel
from jev.model.heads import HeadLayout, TaskHeads
from tests.tiny import random_model, tiny_config

ROWS = [[5, 9, 2, 7, 11, 3], [4, 8], [13, 1, 6, 10]]
LAYOUT = [HeadLayout("kind", 3, False), HeadLayout("tags", 4, True)]


def _network(query_layer: int, index_topk: int = 64) -> DecisionModel:
    torch.manual_seed(0)
    model = random_model(tiny_config(index_topk=index_topk, num_hidden_layers=3))
    return DecisionModel(model, {"t": TaskHeads(model.config.hidden_size, LAYOUT)}, query_layer).eval()


def _reference_states(network: DecisionModel, ids: list[int]) -> torch.Tensor:
    """One row alone, layer by layer: its input to the query layer, then input and queries above it."""
    model, layer = network.model, network.query_layer
    x = model.embed(torch.tensor([ids]))
    x = torch.cat([model.layer_states(x, torch.tensor([len(ids)]), stop=layer), network.heads["t"].queries[None]], 1)
    hidden = model.layer_states(x, torch.tensor([x.shape[1]]), start=layer)
    return hidden[0, len(ids) :]


@pytest.mark.parametrize("query_layer", [0, 1, 2])
def test_a_ragged_batch_equals_each_row_alone(query_layer):
    network = _network(query_layer)
    with torch.no_grad():
        logits = network("t", ROWS).logits
        for r, ids in enumerate(ROWS):
            expected = network.heads["t"](_reference_states(network, ids)[None])
            for field, want in zip(logits, expected, strict=True):
                torch.testing.assert_close(field[r], want[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("index_topk", [64, 3])
@pytest.mark.parametrize("query_layer", [0, 2])
def test_the_last_layer_for_the_field_rows_alone_equals_the_full_pass(query_layer, index_topk):
    """Dense, and with the indexer choosing 3 keys of up to 8 (the absorbed sparse form against the
    full pass's masked expanded one)."""
    network = _network(query_layer, index_topk)
    model, lengths = network.model, torch.tensor([len(ids) for ids in ROWS])
    with torch.no_grad():
        x = model.layer_states(model.embed(_padded(ROWS)), lengths, stop=query_layer)
        x, total, fields = network.with_queries(network.heads["t"], x, lengths)
        full = model.layer_states(x, total, start=query_layer)
        read = model.layer_states(x, total, start=query_layer, read=fields)
        frozen = model.layer_states(x, total, start=query_layer, read=fields, frozen_layers=3)
    torch.testing.assert_close(read, full[torch.arange(len(ROWS)).unsqueeze(1), fields], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(frozen, read, rtol=0, atol=0)


def test_reading_a_subset_of_rows_needs_a_cache_free_pass_through_the_last_layer():
    network = _network(0)
    model, lengths = network.model, torch.tensor([len(ids) for ids in ROWS])
    x, read = model.embed(_padded(ROWS)), torch.zeros(len(ROWS), 1, dtype=torch.long)
    with pytest.raises(ValueError, match="last layer"):
        model.layer_states(x, lengths, stop=2, read=read)
    with pytest.raises(ValueError, match="cache-free"):
        model.layer_states(x, lengths, cache=model.new_cache(len(ROWS), 16), read=read)


def test_the_query_layer_changes_what_the_heads_read():
    with torch.no_grad():
        low, high = _network(0)("t", ROWS).logits[0], _network(2)("t", ROWS).logits[0]
    assert not torch.allclose(low, high, atol=1e-3)


@pytest.mark.parametrize("training", [False, True])
def test_cached_lower_states_give_the_same_logits_and_answer_loss(training):
    network = _network(2)
    answers = [[3, 4], [5], [6, 7, 8]]
    with torch.no_grad():
        full = network("t", ROWS, training=training, answers=answers)
        lowers = network.input_states([ids + answer for ids, answer in zip(ROWS, answers, strict=True)])
        cached = network("t", ROWS, training=training, answers=answers, lower_states=lowers)
    for a, b in zip(full.logits, cached.logits, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(full.answer_loss, cached.answer_loss, rtol=1e-5, atol=1e-6)


def _padded(rows: list[list[int]]) -> torch.Tensor:
    padded = torch.zeros(len(rows), max(len(ids) for ids in rows), dtype=torch.long)
    for r, ids in enumerate(rows):
        padded[r, : len(ids)] = torch.tensor(ids)
    return padded


def test_the_decision_cache_rolled_back_is_a_prefill_of_the_input():
    network = _network(1)
    model = network.model
    lengths = torch.tensor([len(ids) for ids in ROWS])
    padded = _padded(ROWS)
    with torch.no_grad():
        decided = model.new_cache(len(ROWS), 16)
        logits = network("t", ROWS, cache=decided).logits
        decided.truncate(lengths)
        plain = model.new_cache(len(ROWS), 16)
        model.hidden_states(padded, cache=plain, lengths=lengths)
        expected = network("t", ROWS).logits
    torch.testing.assert_close(logits[0], expected[0], rtol=1e-5, atol=1e-6)
    assert torch.equal(decided.lengths, plain.lengths)
    for layer in range(model.config.num_hidden_layers):
        for r, n in enumerate(lengths.tolist()):
            mine, theirs = decided.view(layer, n)[0][r, :n], plain.view(layer, n)[0][r, :n]
            torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)


def test_a_query_layer_outside_the_model_is_refused():
    model = random_model(tiny_config(num_hidden_layers=2))
    heads = {"t": TaskHeads(model.config.hidden_size, LAYOUT)}
    with pytest.raises(ValueError, match=r"query_layer must be 0\.\.1"):
        DecisionModel(model, heads, 2)
