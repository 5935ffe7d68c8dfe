"""Run states without pickle: exact round trips, atomic replacement, and clear refusals."""

import json
import random
from dataclasses import replace

import pytest
import torch

from jev.model import Model
from jev.train.optim import build_optimizer
from jev.train.presets import TINY_TEST_CONFIG
from jev.train.state import TrainStateError, find_train_state, load_train_state, save_train_state

IDS = torch.randint(0, 512, (2, 17), generator=torch.Generator().manual_seed(0))


def fresh(seed: int = 0) -> tuple[Model, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = Model(TINY_TEST_CONFIG).train()
    return model, build_optimizer(model, lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95))


def train(model: Model, optimizer: torch.optim.Optimizer, steps: int) -> None:
    for _ in range(steps):
        hidden, indexer_loss = model.training_states(IDS[:, :-1])
        loss = torch.nn.functional.cross_entropy(model.lm_head(hidden).flatten(0, 1), IDS[:, 1:].flatten())
        (loss + indexer_loss + 1e-3 * torch.rand(()).item()).backward()
        optimizer.step()
        optimizer.zero_grad()


@pytest.mark.slow
def test_half_save_reload_half_equals_straight(tmp_path):
    straight, straight_opt = fresh()
    train(straight, straight_opt, 4)

    model, optimizer = fresh()
    train(model, optimizer, 2)
    save_train_state(tmp_path / "state", model, optimizer, {"step": 2})
    torch.manual_seed(99)
    reloaded, reloaded_opt = fresh(seed=7)
    assert load_train_state(tmp_path / "state", reloaded, reloaded_opt) == {"step": 2}
    train(reloaded, reloaded_opt, 2)

    for (name, a), b in zip(straight.state_dict().items(), reloaded.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_rng_states_come_back(tmp_path):
    model, optimizer = fresh()
    torch.manual_seed(5)
    random.seed(5)
    save_train_state(tmp_path / "state", model, optimizer, {})
    expected = (torch.rand(3), random.random())
    torch.manual_seed(6)
    random.seed(6)
    load_train_state(tmp_path / "state", model, optimizer)
    assert torch.equal(torch.rand(3), expected[0]) and random.random() == expected[1]


def test_only_safetensors_and_json_are_written(tmp_path):
    model, optimizer = fresh()
    train(model, optimizer, 1)
    save_train_state(tmp_path / "state", model, optimizer, {"step": 1})
    names = sorted(p.name for p in (tmp_path / "state").iterdir())
    assert names == ["model.safetensors", "optimizer.safetensors", "rng.safetensors", "state.json"]
    meta = json.loads((tmp_path / "state" / "state.json").read_text())
    assert meta["optimizer"]["param_groups"][0]["weight_decay"] == 0.1


def test_saving_again_replaces_the_state_and_a_half_done_swap_still_loads(tmp_path):
    model, optimizer = fresh()
    save_train_state(tmp_path / "state", model, optimizer, {"step": 1})
    save_train_state(tmp_path / "state", model, optimizer, {"step": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]
    (tmp_path / "state").rename(tmp_path / "state.old")  # killed between the two renames
    assert find_train_state(tmp_path / "state") == tmp_path / "state.old"
    assert load_train_state(tmp_path / "state", *fresh()) == {"step": 2}


def test_missing_or_mismatched_states_are_refused(tmp_path):
    with pytest.raises(TrainStateError, match="no training state"):
        load_train_state(tmp_path / "state", *fresh())
    model, optimizer = fresh()
    save_train_state(tmp_path / "state", model, optimizer, {})
    torch.manual_seed(0)
    other = Model(replace(TINY_TEST_CONFIG, num_hidden_layers=1, mlp_layer_types=[]))
    with pytest.raises(TrainStateError, match="does not fit"):
        load_train_state(tmp_path / "state", other, build_optimizer(other, 1e-2, 0.1, (0.9, 0.95)))
