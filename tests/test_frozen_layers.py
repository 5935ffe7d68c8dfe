"""A training pass may leave the lowest layers' weights alone (`frozen_layers`) while everything else,
the embeddings included, learns from it exactly as before."""

import pytest
import torch

from tests.tiny import random_model, tiny_config

IDS = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(1))


def _layer(name: str) -> int | None:
    parts = name.split(".")
    return int(parts[2]) if parts[:2] == ["backbone", "layers"] else None


def test_frozen_layers_keep_the_outputs_and_only_their_own_weights_lose_the_gradient():
    model = random_model(tiny_config(index_topk=8, num_hidden_layers=3)).train()
    names, params = zip(*model.named_parameters(), strict=True)

    def grads(frozen: int) -> tuple[torch.Tensor, tuple[torch.Tensor | None, ...]]:
        hidden, _ = model.training_states(IDS, frozen_layers=frozen)
        loss = model.lm_head(hidden).logsumexp(-1).mean()
        return hidden, torch.autograd.grad(loss, params, allow_unused=True)

    full_hidden, full = grads(0)
    hidden, frozen = grads(2)
    assert torch.equal(hidden, full_hidden)
    for name, g_full, g_frozen in zip(names, full, frozen, strict=True):
        if ".indexer." in name:
            continue  # the language loss never reaches the indexers (test_indexer_training)
        layer = _layer(name)
        if layer is not None and layer < 2:
            assert g_full is not None and g_full.any(), name
            assert g_frozen is None, name
        else:
            assert g_frozen is not None and torch.allclose(g_frozen, g_full, rtol=1e-5, atol=1e-7), name
    embeddings = frozen[names.index("backbone.embed_tokens.weight")]
    assert embeddings is not None and embeddings.any()  # the gradient still flows through frozen layers


@pytest.mark.parametrize("frozen", [-1, 4])
def test_more_frozen_layers_than_the_model_has_are_refused(frozen):
    model = random_model(tiny_config(index_topk=8, num_hidden_layers=3))
    with pytest.raises(ValueError, match=r"0\.\.3"):
        model.training_states(IDS, frozen_layers=frozen)
