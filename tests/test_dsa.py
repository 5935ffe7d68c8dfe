"""DSA: the indexer's scores, top-k selection and sparse attention over gathered latents."""

import pytest
import torch
from jev.kernels import reference as ref

from tests.tiny import random_model, rel_err, tiny_config

GEN = torch.Generator().manual_seed(0)


def explicit_index_scores(q, w, k, positions, scale):
    """`I[t, s] = sum_j w[t, j] * relu(scale * q[t, j] . k[s])` as plain loops, in float64."""
    batch, length, heads, _ = q.shape
    out = torch.full((batch, length, k.shape[1]), float("-inf"), dtype=torch.float64)
    for b in range(batch):
        for t in range(length):
            for s in range(int(positions[b, t]) + 1):
                out[b, t, s] = sum(
                    float(w[b, t, j]) * max(0.0, scale * float(q[b, t, j].double() @ k[b, s].double()))
                    for j in range(heads)
                )
    return out


def test_indexer_logits_equal_explicit_loop():
    q, w = torch.randn(2, 5, 3, 8, generator=GEN), torch.randn(2, 5, 3, generator=GEN)
    k = torch.randn(2, 9, 8, generator=GEN)
    positions = torch.tensor([[4, 5, 6, 7, 8], [0, 1, 2, -1, -1]])
    actual = ref.indexer_logits(q, w, k, positions, 0.35)
    expected = explicit_index_scores(q, w, k, positions, 0.35)
    assert torch.equal(actual.isinf(), expected.isinf())
    finite = expected.isfinite()
    assert torch.allclose(actual[finite].double(), expected[finite], atol=1e-6)


def test_hadamard_rotation_of_queries_and_keys_leaves_scores_unchanged():
    d = 8
    hadamard = torch.tensor([[1.0]])
    while hadamard.shape[0] < d:
        hadamard = torch.cat([torch.cat([hadamard, hadamard], 1), torch.cat([hadamard, -hadamard], 1)], 0)
    hadamard = hadamard / d**0.5
    q, w = torch.randn(1, 6, 2, d, generator=GEN), torch.randn(1, 6, 2, generator=GEN)
    k = torch.randn(1, 6, d, generator=GEN)
    positions = torch.arange(6).unsqueeze(0)
    plain = ref.indexer_logits(q, w, k, positions, 1.0)
    rotated = ref.indexer_logits(q @ hadamard, w, k @ hadamard, positions, 1.0)
    finite = plain.isfinite()
    assert torch.allclose(plain[finite], rotated[finite], atol=1e-5)


def check_selection(indices: torch.Tensor, positions: torch.Tensor, k: int) -> None:
    for b in range(indices.shape[0]):
        for t in range(indices.shape[1]):
            chosen = [i for i in indices[b, t].tolist() if i >= 0]
            assert len(chosen) == len(set(chosen)), "selected indices must be unique"
            assert all(i <= positions[b, t] for i in chosen), "selected indices must be causal"
            assert len(chosen) == min(k, int(positions[b, t]) + 1)


def test_selection_is_causal_unique_and_counts_min_k_t_plus_1():
    positions = torch.arange(50).unsqueeze(0)
    scores = ref.indexer_logits(torch.randn(1, 50, 4, 8, generator=GEN), torch.randn(1, 50, 4, generator=GEN),
                                torch.randn(1, 50, 8, generator=GEN), positions, 0.3)
    check_selection(ref.select_topk(scores, 10), positions, 10)


def test_selection_with_tied_scores_is_still_valid():
    """Constant scores: which tied index wins is unspecified, so check validity and the chosen scores."""
    positions = torch.arange(30).unsqueeze(0)
    scores = torch.zeros(1, 30, 30).masked_fill(~ref.causal_key_mask(positions, 30), float("-inf"))
    chosen = ref.select_topk(scores, 7)
    check_selection(chosen, positions, 7)
    picked = scores.gather(-1, chosen.clamp(min=0).long())
    assert bool((picked[chosen >= 0] == 0).all())


def test_model_selection_inside_a_forward_pass_is_valid():
    model = random_model(tiny_config(index_topk=12))
    attn = model.backbone.layers[1].self_attn
    x = torch.randn(2, 40, 64, generator=GEN)
    positions = torch.arange(40).expand(2, 40)
    cos, sin = model.backbone.rotary(positions, x.dtype)
    q_compressed = attn.q_a_layernorm(attn.q_a_proj(x))
    keys = attn.indexer.keys(x, cos, sin)
    check_selection(attn.indexer.select(x, q_compressed, keys, positions, cos, sin, attn.index_topk), positions, 12)


def test_the_model_selection_equals_ranking_every_query_explicitly():
    """A fresh pass's queries that see at most k keys skip the ranking; they must select what ranking
    would give. Rows at different offsets make some columns ranked in one row and not in another."""
    model = random_model(tiny_config(index_topk=12))
    attn = model.backbone.layers[1].self_attn
    x = torch.randn(3, 20, 64, generator=GEN)
    positions = torch.arange(20) + torch.tensor([[0], [5], [30]])
    keys_x = torch.randn(3, 50, 64, generator=GEN)
    cos, sin = model.backbone.rotary(positions, x.dtype)
    key_cos, key_sin = model.backbone.rotary(torch.arange(50).expand(3, 50), x.dtype)
    keys = attn.indexer.keys(keys_x, key_cos, key_sin)
    q_compressed = attn.q_a_layernorm(attn.q_a_proj(x))
    with torch.no_grad():
        q, weights = attn.indexer.queries(x, q_compressed, cos, sin)
        expected = ref.select_topk(ref.indexer_logits(q, weights, keys, positions, attn.indexer.scale), 12)
        selected = attn.indexer.select(x, q_compressed, keys, positions, cos, sin, 12)
        selection = (x, q_compressed, keys, positions, cos, sin, 12)
        masks = [attn.indexer.select_mask(*selection, fresh=fresh) for fresh in (False, True)]
    assert torch.equal(selected, expected)
    for mask in masks:
        assert torch.equal(mask, ref.selected_key_mask(expected, 50))
    assert bool((positions < 12).any()) and bool((positions >= 12).any())


def test_topk_at_least_length_equals_dense_attention():
    ids = torch.randint(0, 97, (2, 40), generator=GEN)
    with torch.no_grad():
        exact_k = random_model(tiny_config(index_topk=40))(ids)
        dense = random_model(tiny_config(index_topk=4096))(ids)
        sparse = random_model(tiny_config(index_topk=39))(ids)
    assert rel_err(exact_k, dense) <= 1e-6
    assert rel_err(sparse, dense) > 1e-4, "k < L must actually drop keys"


def test_sparse_rows_without_a_valid_index_give_zeros_not_nan():
    kv = torch.randn(1, 10, 12, generator=GEN)
    kv[0, 5:] = float("nan")
    q_latent, q_rope = torch.randn(1, 2, 3, 8, generator=GEN), torch.randn(1, 2, 3, 4, generator=GEN)
    indices = torch.tensor([[[-1, -1, -1], [0, 3, -1]]], dtype=torch.int32)
    out, lse = ref.sparse_mla(q_latent, q_rope, kv, indices, 0.5)
    assert torch.equal(out[0, 0], torch.zeros(3, 8))
    assert bool(torch.isneginf(lse[0, 0]).all())
    assert bool(out.isfinite().all())


def test_sparse_attention_equals_dense_masked_attention_on_the_same_keys():
    kv = torch.randn(2, 16, 12, generator=GEN)
    q_latent, q_rope = torch.randn(2, 3, 4, 8, generator=GEN), torch.randn(2, 3, 4, 4, generator=GEN)
    positions = torch.tensor([[13, 14, 15], [5, 6, 7]])
    all_indices = torch.arange(16).expand(2, 3, 16)
    indices = torch.where(all_indices <= positions.unsqueeze(-1), all_indices, -1).to(torch.int32)
    sparse, sparse_lse = ref.sparse_mla(q_latent, q_rope, kv, indices, 0.4)
    dense, dense_lse = ref.mla_decode(q_latent, q_rope, kv, positions, 0.4)
    assert torch.allclose(sparse, dense, atol=1e-6)
    assert torch.allclose(sparse_lse, dense_lse, atol=1e-6)


def test_tied_scores_select_the_same_keys_whatever_the_row_width():
    """Padding widens score rows; the chosen keys must not change with it (ties go to earlier keys)."""
    scores = torch.tensor([[[0.5, 0.0, 0.0, 0.0, -0.0, 0.0, 2.0]]])
    narrow = ref.select_topk(scores, 3)
    wide = ref.select_topk(torch.cat([scores, torch.full((1, 1, 9), float("-inf"))], dim=-1), 3)
    assert narrow.tolist() == wide.tolist() == [[[0, 1, 6]]], "ties go to earlier keys; the set comes sorted"
    everything = ref.select_topk(torch.tensor([[[-3.0, -1.0, -2.0, 1.5, float("-inf")]]]), 5)
    assert everything.tolist() == [[[0, 1, 2, 3, -1]]]
    negatives = ref.select_topk(torch.tensor([[[-3.0, -1.0, -2.0, 1.5, -0.5]]]), 3)
    assert negatives.tolist() == [[[1, 3, 4]]], "negative scores rank by value"


def test_selection_equals_an_explicit_ranking_by_score_then_earlier_key():
    """Scores rounded to a few values tie often; each row's selection must be what sorting its keys by
    (score descending, position ascending) and keeping the first k gives, ascending, -1 for masked."""
    positions = torch.tensor([[3, 9, 20, 39], [0, 12, 25, 39]])
    scores = (torch.randn(2, 4, 40, generator=GEN) * 2).round() / 2
    scores = scores.masked_fill(~ref.causal_key_mask(positions, 40), float("-inf"))
    for k in (1, 8, 13, 40):
        expected = []
        for row in scores.tolist():
            expected.append([])
            for query in row:
                ranked = sorted(range(40), key=lambda s, q=query: (-q[s], s))[:k]
                expected[-1].append([s if query[s] != float("-inf") else -1 for s in sorted(ranked)])
        assert ref.select_topk(scores, k).tolist() == expected, k
        assert torch.equal(ref.top_key_mask(scores, k), ref.selected_key_mask(torch.tensor(expected), 40)), k


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::DeprecationWarning")
def test_a_traced_selection_replays_over_more_keys_and_new_ties_as_eager_selects():
    """Traced where no row ties (a decode step's usual case), replayed where rows tie, over more keys."""
    traced = torch.jit.trace(lambda scores: ref.top_key_mask(scores, 4), torch.randn(1, 1, 10, generator=GEN))
    tied = (torch.randn(2, 3, 13, generator=GEN) * 2).round() / 2
    tied[1, 2, 7:] = float("-inf")
    for scores in (tied, torch.randn(1, 1, 11, generator=GEN)):
        assert torch.equal(traced(scores), ref.top_key_mask(scores, 4))


def test_a_short_prefill_masks_dense_attention_to_the_selection_exactly_as_the_gather_does(monkeypatch):
    from jev.kernels import ops

    from jev.model import mla

    ids = torch.randint(0, 97, (3, 50), generator=GEN)
    lengths = torch.tensor([50, 31, 17])
    model = random_model(tiny_config(index_topk=12))
    with torch.no_grad():
        masked = model(ids, lengths=lengths)
        cache = model.new_cache(3, 60)
        masked_cached = model(ids, cache=cache, lengths=lengths)
        monkeypatch.setattr(mla, "DENSE_PREFILL_MAX_KEYS", 0)
        monkeypatch.setattr(ops, "FUSED_SPARSE_MAX_KEYS", 0)
        gathered = model(ids, lengths=lengths)
    for row, n in enumerate(lengths.tolist()):
        assert rel_err(masked[row, :n], gathered[row, :n]) <= 1e-5
        assert rel_err(masked_cached[row, :n], gathered[row, :n]) <= 1e-5
    mask = ref.selected_key_mask(torch.tensor([[[2, 0, -1]]]), 4)
    assert mask.tolist() == [[[True, False, True, False]]]


def test_selecting_k_keys_is_the_model_configured_with_that_index_topk():
    ids = torch.randint(0, 97, (2, 40), generator=GEN)
    served = random_model(tiny_config(index_topk=12))
    narrower = random_model(tiny_config(index_topk=6))
    with torch.no_grad():
        with served.selecting(6):
            assert torch.equal(served(ids), narrower(ids))
        assert not torch.allclose(served(ids), narrower(ids)), "top-12 and top-6 of 40 keys should differ"
