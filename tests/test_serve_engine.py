"""The server's engine loads its decider in a thread that ends with the load (why: `load_apart`)."""

import threading

import pytest

from jev import Decider
from jev.model.checkpoint import CheckpointError
from jev.serve import engine as engine_module
from jev.serve.engine import Engine
from schemas.examples import TASK as EXAMPLE_TASK
from tests.tiny import random_model, tiny_config, tiny_tokenizer

TICKET = {"subject": "refund", "body": "Win a free cruise now! refund please"}


def test_the_decider_loads_in_a_thread_that_has_ended_when_the_engine_is_ready(tmp_path, monkeypatch) -> None:
    model = random_model(tiny_config(index_topk=6, vocab_size=400, max_position_embeddings=256))
    Decider.new(model, tiny_tokenizer(), {"schemas.examples:TASK": EXAMPLE_TASK}, max_input_tokens=48).save(tmp_path)
    loaders: list[threading.Thread] = []
    load = Decider.load

    def spied(*args, **kwargs):
        loaders.append(threading.current_thread())
        return load(*args, **kwargs)

    monkeypatch.setattr(engine_module.Decider, "load", spied)
    engine = Engine.load(tmp_path, weights="float32")
    assert len(loaders) == 1
    assert loaders[0] is not threading.current_thread()
    assert not loaders[0].is_alive() and loaders[0].daemon  # Ctrl-C during a load ends the process
    assert engine.decider.decide(EXAMPLE_TASK.decision_model, TICKET).usage.decision_passes == 1


def test_a_decider_that_cannot_load_fails_the_engine_load_with_its_own_error(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="missing is not a Jev decider"):
        Engine.load(tmp_path / "missing")
