"""`jev train drafter`: distillation lowers KL to the target, and the folder drives speculative decoding."""

import json
from pathlib import Path

import pytest

from jev.cli import build_parser
from jev.generate.drafters.autoregressive import AutoregressiveDrafter
from jev.generate.loop import generate
from jev.model import Model
from jev.tokenizer import save_tokenizer
from jev.train.drafter import drafter_config
from tests.tiny import random_model, tiny_config, tiny_tokenizer

TEXT = ["Win a free cruise now!", "Meeting moved to Tuesday, see agenda.", "Re: patch for the kernel build"]


pytestmark = pytest.mark.usefixtures("one_thread")


def test_drafter_command_distils_and_the_result_drafts(tmp_path: Path) -> None:
    tokenizer = tiny_tokenizer()
    target = random_model(tiny_config(vocab_size=tokenizer.get_vocab_size()), seed=0)
    target.save_pretrained(tmp_path / "target")
    save_tokenizer(tokenizer, tmp_path / "target", {"bos_token": "<bos>", "chat_template": "{{ x }}"})
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXT * 40))

    args = build_parser().parse_args(
        [
            "train",
            "drafter",
            "--kind",
            "autoregressive",
            "--target",
            str(tmp_path / "target"),
            "--corpus",
            str(corpus),
            "--out",
            str(tmp_path / "drafter"),
            "--steps",
            "40",
            "--batch-size",
            "4",
            "--block-size",
            "32",
            "--hidden-size",
            "64",
            "--lr",
            "3e-3",
        ]
    )
    assert args.func(args) == 0

    provenance = json.loads((tmp_path / "drafter" / "drafter.json").read_text())
    assert provenance["final_kl"] < 0.5 * provenance["first_kl"]
    assert 0 < provenance["held_out_acceptance_t1"] <= 1
    target = Model.from_pretrained(tmp_path / "target")
    drafter = AutoregressiveDrafter.load(tmp_path / "drafter", target)
    assert drafter.model.config.num_hidden_layers == 1
    assert (tmp_path / "drafter" / "tokenizer.json").is_file()
    config = json.loads((tmp_path / "drafter" / "tokenizer_config.json").read_text())
    assert config == {"bos_token": "<bos>", "chat_template": "{{ x }}"}, "the target's config, kept"

    prompts = [tokenizer.encode(t).ids[:4] for t in TEXT]
    plain = generate(target, prompts, 8, temperature=0.0)
    spec = generate(target, prompts, 8, temperature=0.0, drafter=drafter, draft_len=3)
    assert spec.tokens == plain.tokens


def test_drafter_config_keeps_the_vocabulary_and_is_small() -> None:
    target = tiny_config(vocab_size=400)
    config = drafter_config(target, layers=2, hidden_size=64)
    assert (config.vocab_size, config.num_hidden_layers, config.hidden_size) == (400, 2, 64)
    assert config.mlp_layer_types == ["dense", "dense"]
