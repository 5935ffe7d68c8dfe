"""`jev decide`: one input through a decider folder, printed as JSON."""

import argparse
import json
import sys
from pathlib import Path

from jev.command import MODEL_HELP, NO_SPECULATIVE_HELP, model_folder
from jev.schema import JevError


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Register `decide`; its handler is stored as `args.func` and returns an exit code."""
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
