"""The pretraining loop: it learns, it is reproducible, and a resumed run equals an unbroken one."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from jev.model import Model
from jev.tokenizer import load_tokenizer
from jev.train import lm
from jev.train.lm import LMSettings, pretrain
from jev.train.presets import TINY_TEST_CONFIG
from jev.train.state import TrainStateError

CORPUS = [Path("tests/fixtures/train/corpus")]


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: the CI box is shared, and tiny matmuls gain nothing from more."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_settings(out: Path, **overrides) -> LMSettings:
    values = dict(
        block_size=32, batch_size=4, steps=6, lr=1e-2, warmup=2, save_every=100, eval_every=0, held_out_fraction=0.1
    )
    return LMSettings(model=TINY_TEST_CONFIG, texts=CORPUS, out=out, **{**values, **overrides})


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def assert_same_weights(a: Path, b: Path) -> None:
    first, second = weights(a), weights(b)
    assert first.keys() == second.keys()
    for name in first:
        assert torch.equal(first[name], second[name]), name


def test_loss_falls_and_the_folder_is_a_loadable_model(tmp_path):
    out = pretrain(tiny_settings(tmp_path / "run", steps=30, eval_every=15))
    report = json.loads((out / "train_lm.json").read_text())
    assert report["steps"] == 30 and report["tokens_seen"] == 30 * 4 * 32
    assert report["final_loss"] < report["first_loss"] - 1.0
    evals = report["evals"]
    assert [e["step"] for e in evals] == [0, 15, 30]
    assert evals[-1]["val_loss"] < evals[0]["val_loss"]
    assert report["settings"]["texts"] == [str(p) for p in CORPUS]
    model = Model.from_pretrained(out)
    tokenizer = load_tokenizer(out)
    ids = torch.tensor([[0, *tokenizer.encode("Shall I compare thee").ids]])
    assert model(ids).shape == (1, ids.shape[1], TINY_TEST_CONFIG.vocab_size)


def test_the_same_seed_gives_the_same_weights_bit_for_bit(tmp_path):
    assert_same_weights(pretrain(tiny_settings(tmp_path / "a")), pretrain(tiny_settings(tmp_path / "b")))
    other = pretrain(tiny_settings(tmp_path / "c", seed=1))
    assert not torch.equal(weights(tmp_path / "a")["lm_head.weight"], weights(other)["lm_head.weight"])


class Preempted(Exception):
    """Stands in for a job killed right after a checkpoint."""


def test_a_run_killed_after_a_checkpoint_resumes_to_the_same_weights(tmp_path, monkeypatch):
    straight = pretrain(tiny_settings(tmp_path / "straight", eval_every=3))
    real_save = lm.save_train_state

    def save_then_die(folder, model, optimizer, progress):
        real_save(folder, model, optimizer, progress)
        raise Preempted

    monkeypatch.setattr(lm, "save_train_state", save_then_die)
    with pytest.raises(Preempted):
        pretrain(tiny_settings(tmp_path / "resumed", save_every=3, eval_every=3))
    monkeypatch.setattr(lm, "save_train_state", real_save)
    torch.manual_seed(12345)  # a fresh process would start from other RNG state
    resumed = pretrain(tiny_settings(tmp_path / "resumed", save_every=3, eval_every=3, resume=True))

    assert_same_weights(straight, resumed)
    first, second = (json.loads((p / "train_lm.json").read_text()) for p in (straight, resumed))
    assert first["evals"] == second["evals"] and first["final_loss"] == second["final_loss"]


def test_resume_refuses_a_state_from_other_settings_or_none(tmp_path):
    pretrain(tiny_settings(tmp_path / "run", steps=2))
    with pytest.raises(TrainStateError, match="another seed"):
        pretrain(tiny_settings(tmp_path / "run", steps=4, seed=3))
    with pytest.raises(TrainStateError, match="nothing to resume"):
        pretrain(tiny_settings(tmp_path / "empty", resume=True))


def test_a_finished_run_extends_from_its_final_state(tmp_path):
    pretrain(tiny_settings(tmp_path / "run", steps=2))
    report = json.loads((pretrain(tiny_settings(tmp_path / "run", steps=4)) / "train_lm.json").read_text())
    assert report["steps"] == 4 and report["tokens_seen"] == 4 * 4 * 32


def test_vocab_size_override_reaches_the_model(tmp_path):
    out = pretrain(tiny_settings(tmp_path / "run", steps=1, vocab_size=300))
    assert weights(out)["lm_head.weight"].shape[0] == 300
    assert TINY_TEST_CONFIG.vocab_size == 512


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"steps": 0}, "steps must be positive"), ({"block_size": 1024}, "max_position_embeddings")],
)
def test_impossible_settings_are_refused(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_settings(tmp_path, **overrides)
