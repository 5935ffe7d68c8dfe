"""The learning-rate schedule, weight-decay groups and the single-process distributed context."""

import itertools

import pytest
import torch
from torch import nn

from jev.model import Model
from jev.train.distributed import Distributed
from jev.train.optim import build_optimizer, lr_at
from jev.train.presets import TINY_TEST_CONFIG


def test_warm_up_rises_linearly_then_cosine_falls_to_the_floor():
    rates = [lr_at(step, peak=1.0, warmup=4, total=14) for step in range(15)]
    assert rates[:4] == [0.25, 0.5, 0.75, 1.0]
    assert all(a >= b for a, b in itertools.pairwise(rates[3:]))
    assert rates[9] == pytest.approx(0.55) and rates[14] == pytest.approx(0.1)


def test_only_matrices_decay():
    model = Model(TINY_TEST_CONFIG)
    decayed, plain = build_optimizer(model, 1e-3, 0.1, (0.9, 0.95)).param_groups
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decayed["params"]) and all(p.dim() == 1 for p in plain["params"])
    assert len(decayed["params"]) + len(plain["params"]) == len(list(model.parameters()))


def test_without_torchrun_everything_is_one_process():
    with Distributed.init({}) as ddp:
        assert (ddp.rank, ddp.world_size, ddp.is_main) == (0, 1, True)
        module = nn.Linear(2, 2)
        assert ddp.wrap(module) is module
        value = torch.tensor([1.0, 3.0])
        assert torch.equal(ddp.all_reduce_mean(value), value)
        ddp.barrier()


def test_a_partial_torchrun_environment_is_refused():
    with pytest.raises(RuntimeError, match="torchrun"):
        Distributed.init({"WORLD_SIZE": "2", "RANK": "0"})
