"""`jev train lm` as the main CLI mounts it: options reach the run and the handler names the output."""

import argparse
import json

import pytest

from jev.cli import build_parser
from jev.model import ConfigError
from jev.train.cli import model_config
from jev.train.presets import DEFAULT_MODEL_CONFIG, TINY_TEST_CONFIG


def parse(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(["train", *argv])


def test_lm_trains_and_prints_where_the_model_is(tmp_path, capsys):
    out = tmp_path / "model"
    args = parse(
        [
            "lm",
            "--corpus",
            "tests/fixtures/train/corpus/sonnets.txt",
            "tests/fixtures/train/corpus",
            "--out",
            str(out),
            "--config",
            "tiny",
            "--steps",
            "2",
            "--batch-size",
            "4",
            "--block-size",
            "16",
            "--lr",
            "0.005",
            "--seed",
            "3",
            "--vocab-size",
            "300",
            "--eval-every",
            "0",
        ]
    )
    assert args.func(args) == 0
    assert f"wrote the model to {out}" in capsys.readouterr().out
    settings = json.loads((out / "train_lm.json").read_text())["settings"]
    assert (settings["seed"], settings["lr"], settings["block_size"], settings["steps"]) == (3, 0.005, 16, 2)
    assert settings["model"]["vocab_size"] == 300 and settings["model"]["hidden_size"] == TINY_TEST_CONFIG.hidden_size

    again = parse(
        [
            "lm",
            "--corpus",
            "tests/fixtures/train/corpus",
            "--out",
            str(tmp_path / "reuse"),
            "--config",
            str(out / "config.json"),
            "--tokenizer",
            str(out / "tokenizer.json"),
            "--steps",
            "1",
            "--batch-size",
            "4",
            "--block-size",
            "16",
            "--eval-every",
            "0",
        ]
    )
    assert again.func(again) == 0
    assert (tmp_path / "reuse" / "tokenizer.json").read_text() == (out / "tokenizer.json").read_text()


def test_config_choices():
    assert model_config("default") == DEFAULT_MODEL_CONFIG
    with pytest.raises(ConfigError, match=r"no config\.json"):
        model_config("no/such/dir")
