"""`jev train lm`: the argparse hook the main CLI mounts under `train`.

Run it under `torchrun --nproc_per_node N` to train on N processes; nothing else changes.
"""

import argparse
import os
from pathlib import Path

from jev.model import ModelConfig
from jev.train.lm import LMSettings, pretrain
from jev.train.presets import PRESETS


def add_lm_command(train_subparsers: argparse._SubParsersAction) -> None:
    """Register `lm`; its handler is stored as `args.func` and returns an exit code."""
    parser = train_subparsers.add_parser("lm", help="pretrain the language model on text (tokenizer included)")
    parser.add_argument(
        "--corpus",
        type=Path,
        nargs="+",
        required=True,
        help=".txt / .jsonl files or folders of them (jsonl: the `input` field's strings)",
    )
    parser.add_argument("--out", type=Path, required=True, help="model folder to write (and resume from)")
    parser.add_argument(
        "--config",
        default="default",
        help=f"architecture: {' | '.join(PRESETS)} | path to a config.json (default: default)",
    )
    defaults = LMSettings(model=PRESETS["default"], texts=[], out=Path())
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size, help="global, split across processes")
    parser.add_argument("--block-size", type=int, default=defaults.block_size, help="tokens per training sequence")
    parser.add_argument("--lr", type=float, default=defaults.lr, help="peak learning rate")
    parser.add_argument("--warmup", type=int, default=defaults.warmup, help="linear warm-up steps")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--save-every", type=int, default=defaults.save_every, help="steps between checkpoints")
    parser.add_argument("--eval-every", type=int, default=defaults.eval_every, help="steps between evaluations")
    parser.add_argument(
        "--indexer-weight", type=float, default=defaults.indexer_weight, help="weight of the DSA indexer's KL loss"
    )
    parser.add_argument("--tokenizer", type=Path, default=None, help="reuse this tokenizer.json instead of training")
    parser.add_argument("--vocab-size", type=int, default=None, help="override the config's vocabulary size")
    parser.add_argument("--resume", action="store_true", help="require a saved state in OUT/train_state to resume")
    parser.set_defaults(func=_run_lm)


def model_config(choice: str) -> ModelConfig:
    """A preset by name, else the `config.json` at that path (or in that folder)."""
    return PRESETS[choice] if choice in PRESETS else ModelConfig.load(choice)


def _run_lm(args: argparse.Namespace) -> int:
    settings = LMSettings(
        model=model_config(args.config),
        texts=args.corpus,
        out=args.out,
        block_size=args.block_size,
        batch_size=args.batch_size,
        steps=args.steps,
        lr=args.lr,
        warmup=args.warmup,
        seed=args.seed,
        save_every=args.save_every,
        eval_every=args.eval_every,
        indexer_weight=args.indexer_weight,
        tokenizer=args.tokenizer,
        vocab_size=args.vocab_size,
        resume=args.resume,
    )
    out = pretrain(settings)
    if os.environ.get("RANK", "0") == "0":
        print(f"wrote the model to {out}")
    return 0
