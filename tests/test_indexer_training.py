"""DSA's dense warm-up: training keeps attention dense and teaches the indexer where attention goes."""

import torch

from tests.tiny import random_model, rel_err, tiny_config

IDS = torch.randint(0, 97, (2, 48), generator=torch.Generator().manual_seed(0))


def test_training_states_equal_dense_inference_states():
    model = random_model(tiny_config(index_topk=4096))
    hidden, _ = model.training_states(IDS)
    with torch.no_grad():
        assert rel_err(hidden, model.hidden_states(IDS)) <= 1e-5


def test_language_loss_never_reaches_the_indexer_and_indexer_loss_reaches_only_it():
    model = random_model(tiny_config(index_topk=8)).train()
    hidden, indexer_loss = model.training_states(IDS)
    lm_grads = torch.autograd.grad(model.lm_head(hidden).logsumexp(-1).mean(), list(model.parameters()),
                                   allow_unused=True, retain_graph=True)
    kl_grads = torch.autograd.grad(indexer_loss, list(model.parameters()), allow_unused=True)
    for (name, _), lm_grad, kl_grad in zip(model.named_parameters(), lm_grads, kl_grads, strict=True):
        in_indexer = ".indexer." in name
        if in_indexer:
            assert lm_grad is None or not lm_grad.any(), name
            assert kl_grad is not None and kl_grad.any(), name
        else:
            assert kl_grad is None or not kl_grad.any(), name


def test_warm_up_lowers_the_indexer_kl():
    model = random_model(tiny_config(index_topk=8), seed=3).train()
    indexer = [p for n, p in model.named_parameters() if ".indexer." in n]
    optimizer = torch.optim.Adam(indexer, lr=1e-2)
    _, before = model.training_states(IDS)
    for _ in range(40):
        optimizer.zero_grad()
        _, loss = model.training_states(IDS)
        loss.backward()
        optimizer.step()
    _, after = model.training_states(IDS)
    assert after.item() < 0.7 * before.item()
