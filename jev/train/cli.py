"""`jev train lm | decide | drafter`: the command lines over `jev.train.lm`, `jev.train.decide` and the
drafter distillations (`jev.train.drafter`, `jev.train.dspark`, `jev.train.eagle`).

Run `jev train lm` under `torchrun --nproc_per_node N` to train on N processes; nothing else changes.
"""

import argparse
import functools
import os
from pathlib import Path
from typing import Any

from jev.command import MODEL_HELP, add_weights_option, model_folder
from jev.data.examples import ROW_FORMAT
from jev.decide.prompt import RENDERINGS
from jev.generate.drafters import drafter_kind
from jev.generate.drafters.dspark import DSparkConfig, saved_config
from jev.model import ModelConfig
from jev.model.precision import PRECISIONS, resolve_autocast
from jev.schema import JevError, load_task
from jev.train.answer_corpus import AnswerDocuments, OwnAnswers
from jev.train.drafter import DrafterSettings, distill, drafter_config
from jev.train.dspark import OBJECTIVES, DSparkSettings, distill_dspark
from jev.train.eagle import EagleSettings, distill_eagle
from jev.train.lm import LMSettings, pretrain
from jev.train.presets import PRESETS


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Register `train` and its three commands; each handler is stored as `args.func` and returns an exit code."""
    train = commands.add_parser("train", help="train a model").add_subparsers(dest="what", required=True)
    _add_lm(train)
    _add_drafter(train)
    _add_decide(train)


def _add_lm(train_subparsers: argparse._SubParsersAction) -> None:
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


def _add_decide(train: argparse._SubParsersAction) -> None:
    parser = train.add_parser(
        "decide",
        help="fine-tune decision heads and the backbone",
        description="Fine-tune one or more tasks on one backbone. Repeat --task/--data/--valid per task, in\n"
        "order; the folder written holds only the tasks given here.",
        epilog=ROW_FORMAT, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--task", action="append", required=True, help="module:NAME, e.g. schemas.mail:TASK")
    parser.add_argument("--data", action="append", required=True, type=Path, help="training JSONL per task")
    parser.add_argument("--valid", action="append", required=True, type=Path,
                        help="validation JSONL per task (picks the best epoch)")
    parser.add_argument("--out", required=True, type=Path, help="the decider folder to write (created if missing)")
    parser.add_argument("--base", type=Path, default=None,
                        help="backbone + tokenizer to start from " + MODEL_HELP.removeprefix("decider folder "))
    parser.add_argument("--epochs", type=int, default=3, help="passes over the training rows (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=16, help="rows per step (default: %(default)s)")
    parser.add_argument("--lr", type=float, default=5e-4, help="peak learning rate (default: %(default)s)")
    parser.add_argument("--max-input-tokens", type=int, default=256,
                        help="longest input the model reads; longer ones are refused or truncated per task "
                        "(default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the heads and the shuffle (default: %(default)s)")
    parser.add_argument(
        "--answer-weight",
        type=float,
        default=0.0,
        help="weight of the language-modelling loss on each row's answer written as JSON "
        "(default: %(default)s, heads only)",
    )
    parser.add_argument(
        "--task-answer-weight", action="append", default=[], metavar="NAME=W",
        help="a task's own answer-loss weight, by the task's name (e.g. mail=0.1); repeatable (default: "
        "--answer-weight for every task)",
    )
    parser.add_argument(
        "--answer-frozen-layers", type=int, default=0, metavar="N",
        help="the answer loss leaves the weights of the N lowest layers to the heads (default 0: it trains all)",
    )
    parser.add_argument(
        "--frozen-layers", type=int, default=None, metavar="N",
        help="keep the embeddings and the N lowest layers as the base has them; the field queries join at "
        "layer N, and each row's states entering it are computed once (default: a base decider's query layer "
        "when every task is its own, 3 lower when a task is new to it, 0 for a plain backbone; the shipped "
        "model uses 27)",
    )
    parser.add_argument("--frozen-mlps", action="store_true",
                        help="keep the MLPs above the frozen layers too: only attention, norms and heads learn, "
                        "and a folder on a registry base stores no MLP weights (default: they learn)")
    parser.add_argument("--patience", type=int, default=1,
                        help="a task stops training after this many epochs without a better validation loss "
                        "(default: %(default)s)")
    parser.add_argument("--precision", choices=PRECISIONS, default="auto",
                        help="arithmetic of training steps; auto is bfloat16 autocast where the CPU has native "
                        "bfloat16 (AVX-512 BF16, AMX), else float32 (default: %(default)s)")
    parser.add_argument("--rendering", choices=RENDERINGS, default="fields",
                        help="how each input is framed: its field lines alone, after the task's description, or "
                        "as a chat turn through the base's chat template (default: %(default)s)")
    parser.add_argument("--skip-invalid", action="store_true",
                        help="drop rows that fail validation (default: any invalid row stops the run)")
    parser.set_defaults(func=_run_decide)

def _run_decide(args: argparse.Namespace) -> int:
    from jev.train.decide import DecideSettings, TaskData, train_decisions

    if not len(args.task) == len(args.data) == len(args.valid):
        raise JevError("give one --data and one --valid for each --task, in the same order")
    overrides = _task_weights(args.task_answer_weight)
    tasks = [
        TaskData(reference, task, train, valid, overrides.pop(task.name, None))
        for reference, train, valid in zip(args.task, args.data, args.valid, strict=True)
        for task in [load_task(reference)]
    ]
    if overrides:
        raise JevError(f"--task-answer-weight names tasks this run does not train: {sorted(overrides)}")
    out = train_decisions(
        DecideSettings(
            tasks=tasks, base=model_folder(args.base, "--base"), out=args.out, epochs=args.epochs,
            batch_size=args.batch_size, lr=args.lr, max_input_tokens=args.max_input_tokens, seed=args.seed,
            skip_invalid=args.skip_invalid,
            answer_weight=args.answer_weight, answer_frozen_layers=args.answer_frozen_layers,
            frozen_layers=args.frozen_layers, frozen_mlps=args.frozen_mlps, patience=args.patience,
            autocast=resolve_autocast(args.precision), rendering=args.rendering,
        )
    )
    print(f"wrote a decider to {out}")
    return 0

def _task_weights(entries: list[str]) -> dict[str, float]:
    """`NAME=W` entries as {name: weight}; a malformed entry is a clear error, not a traceback."""
    weights = {}
    for entry in entries:
        name, _, value = entry.partition("=")
        try:
            weights[name] = float(value)
        except ValueError:
            raise JevError(f"--task-answer-weight wants NAME=W with W a number, got {entry!r}") from None
        if not name or weights[name] < 0:
            raise JevError(f"--task-answer-weight wants NAME=W with a task name and W >= 0, got {entry!r}")
    return weights


# The autoregressive drafter's default width (DSpark's is `DSparkConfig.width`).
AUTOREGRESSIVE_WIDTH = 128


def _add_drafter(train_subparsers: argparse._SubParsersAction) -> None:
    parser = train_subparsers.add_parser(
        "drafter",
        help="distil a drafter (a small autoregressive LM, DSpark's block drafter or an EAGLE layer) from a target",
    )
    parser.add_argument(
        "--kind", choices=("autoregressive", "dspark", "eagle"), default="dspark",
        help="the drafter to train (default: %(default)s, the kind the default model ships)",
    )
    parser.add_argument("--target", type=Path, required=True, help="the target model folder (with tokenizer.json)")
    parser.add_argument("--corpus", type=Path, nargs="+", required=True, help=".txt / .jsonl files or folders")
    parser.add_argument(
        "--task",
        default=None,
        help="module:NAME: read the --corpus JSONL rows as this task's inputs followed by their JSON answers",
    )
    parser.add_argument(
        "--own-answers", type=int, default=0, metavar="ROWS",
        help="with --task: the target answers the first ROWS rows itself, as `jev decide` does (closed values "
        "decided, text fields written greedily), and the drafter trains on those answers, the text it drafts on, "
        "instead of the labelled rows (default: %(default)s, the labels)",
    )
    parser.add_argument("--out", type=Path, required=True, help="drafter folder to write, e.g. models/default/drafter")
    parser.add_argument(
        "--layers", type=int, default=1,
        help="drafter layers (1-2; dspark: block predictor layers) (default: %(default)s)",
    )
    dspark = DSparkSettings(target=Path(), texts=[], out=Path(), config=DSparkConfig(hidden_size=1, vocab_size=1))
    parser.add_argument(
        "--hidden-size", type=int, default=None,
        help=f"drafter width (default: dspark {dspark.config.width}, autoregressive {AUTOREGRESSIVE_WIDTH})",
    )
    parser.add_argument(
        "--positions",
        type=int,
        default=dspark.config.positions,
        help="(dspark) tokens one drafter pass proposes: the largest draft length it serves (default: %(default)s)",
    )
    parser.add_argument(
        "--markov-rank", type=int, default=dspark.config.markov_rank,
        help="(dspark) Markov head rank (default: %(default)s)",
    )
    parser.add_argument("--no-markov", action="store_true", help="(dspark) no Markov head: the parallel-only ablation")
    parser.add_argument(
        "--objective", choices=OBJECTIVES, default=dspark.objective,
        help="(dspark) train the drafted distributions by KL(p || q), by the rejection chance at T = 1, "
        "TV(p, q), or by their sum (default: %(default)s)",
    )
    parser.add_argument(
        "--position-decay", type=float, default=dspark.position_decay, metavar="GAMMA",
        help="(dspark) weigh drafted position j's distillation loss by exp(-(j - 1) / GAMMA), as DSpark does "
        "(GAMMA 4 there); 0: every position alike (default: %(default)s)",
    )
    parser.add_argument(
        "--init", type=Path, default=None,
        help="(dspark) a DSpark drafter folder to start from, of the shape the options give: to go on training "
        "it, by another --objective or on other text (default: random weights)",
    )
    parser.add_argument(
        "--anchors", type=int, default=dspark.anchors,
        help="(dspark) drafted blocks trained per text block and step (default: %(default)s)",
    )
    eagle = EagleSettings(target=Path(), texts=[], out=Path())
    parser.add_argument(
        "--vocab-size", type=int, default=eagle.vocab_size,
        help="(dspark, eagle) the most frequent tokens of the text the drafter drafts over; dspark: the target's "
        "vocabulary size or more for all of it (default: %(default)s)",
    )
    parser.add_argument(
        "--feature-weight", type=float, default=eagle.feature_weight,
        help="(eagle) weight of the predicted state's smooth-L1 loss (default: %(default)s)",
    )
    add_weights_option(parser)
    parser.add_argument(
        "--precision", choices=PRECISIONS, default="auto",
        help="(dspark, eagle) arithmetic of the steps: auto is bfloat16 autocast where the CPU has native bfloat16 "
        "(AVX-512 BF16, AMX), else float32 (default: %(default)s)",
    )
    defaults = DrafterSettings(target=Path(), texts=[], out=Path(), config=ModelConfig())
    parser.add_argument(
        "--steps", type=int, default=None,
        help=f"(default: dspark {dspark.steps}, eagle {eagle.steps}, autoregressive {defaults.steps})",
    )
    parser.add_argument(
        "--batch-size", type=int, default=defaults.batch_size, help="blocks a step (default: %(default)s)"
    )
    parser.add_argument(
        "--block-size", type=int, default=defaults.block_size, help="tokens a block (default: %(default)s)"
    )
    parser.add_argument(
        "--lr", type=float, default=None, help=f"peak learning rate (default: {defaults.lr}; eagle {eagle.lr})"
    )
    parser.add_argument("--seed", type=int, default=defaults.seed, help="(default: %(default)s)")
    kind_defaults = {dest: parser.get_default(dest) for dest in set().union(*_KIND_OPTIONS.values())}
    parser.set_defaults(func=functools.partial(_run_drafter, defaults=kind_defaults))


# The options each drafter kind reads besides the shared ones; another kind's option is refused.
_KIND_OPTIONS = {
    "autoregressive": {"layers", "hidden_size"},
    "dspark": {
        "layers", "hidden_size", "positions", "markov_rank", "no_markov", "objective", "position_decay", "init",
        "anchors", "vocab_size", "weights", "precision",
    },
    "eagle": {"vocab_size", "feature_weight", "weights", "precision"},
}

def _run_drafter(args: argparse.Namespace, defaults: dict[str, Any]) -> int:
    given = {dest for dest, default in defaults.items() if getattr(args, dest) != default}
    foreign = sorted(given - _KIND_OPTIONS[args.kind])
    if foreign:
        flags = ", ".join("--" + dest.replace("_", "-") for dest in foreign)
        raise JevError(f"{flags}: not options of --kind {args.kind}")
    target_config = ModelConfig.load(args.target)
    if args.own_answers < 0:
        raise JevError(f"--own-answers {args.own_answers}: a number of rows, 0 or more")
    if args.own_answers and not args.task:
        raise JevError("--own-answers: the target answers a task's rows: name the task with --task")
    if args.task and args.own_answers:
        args.corpus = OwnAnswers(args.task, args.corpus, args.target, args.own_answers, args.weights)
    elif args.task:
        args.corpus = AnswerDocuments(args.task, args.corpus)
    if args.kind == "dspark":
        return _run_dspark(args, target_config)
    if args.kind == "eagle":
        settings = EagleSettings(
            vocab_size=args.vocab_size, feature_weight=args.feature_weight, weights=args.weights,
            autocast=resolve_autocast(args.precision), **_shared(args),
        )
        print(f"wrote the EAGLE drafter to {distill_eagle(settings)}")
        return 0
    width = AUTOREGRESSIVE_WIDTH if args.hidden_size is None else args.hidden_size
    settings = DrafterSettings(config=drafter_config(target_config, args.layers, width), **_shared(args))
    print(f"wrote the drafter to {distill(settings)}")
    return 0

def _shared(args: argparse.Namespace) -> dict[str, Any]:
    """The settings every drafter kind takes from the command line."""
    return {
        "target": args.target, "texts": args.corpus, "out": args.out, "block_size": args.block_size,
        "batch_size": args.batch_size, "seed": args.seed,
        **({} if args.lr is None else {"lr": args.lr}), **({} if args.steps is None else {"steps": args.steps}),
    }

def _run_dspark(args: argparse.Namespace, target_config: ModelConfig) -> int:
    width = DSparkConfig.width if args.hidden_size is None else args.hidden_size
    config = DSparkConfig.for_target(
        target_config,
        width=width,
        layers=args.layers,
        heads=max(1, width // 32),
        positions=args.positions,
        markov_rank=0 if args.no_markov else args.markov_rank,
    )
    if args.init is not None:
        if drafter_kind(args.init) != "dspark":
            raise JevError(f"--init {args.init}: not a DSpark drafter folder")
        if (shape := saved_config(args.init)) != config:
            raise JevError(f"--init {args.init} holds a drafter of shape {shape}; the options give {config}")
    settings = DSparkSettings(
        config=config, anchors=args.anchors, objective=args.objective, position_decay=args.position_decay,
        init=args.init, vocab_size=args.vocab_size, weights=args.weights, autocast=resolve_autocast(args.precision),
        **_shared(args),
    )
    print(f"wrote the DSpark drafter to {distill_dspark(settings)}")
    return 0
