"""`jev decide`: one input through a decider folder, printed as JSON; `jev profile`: measure, once per
machine, the verify profile a folder's drafter is scheduled by."""

import argparse
import json
import sys
from pathlib import Path

from jev.command import MODEL_HELP, NO_SPECULATIVE_HELP, add_weights_option, model_folder
from jev.schema import JevError


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Register `decide`; its handler is stored as `args.func` and returns an exit code."""
    parser = commands.add_parser("decide", help="decide one input and print the result as JSON")
    parser.add_argument("--task", required=True, help="the task's name in the model, e.g. mail")
    parser.add_argument("input", help='the input as JSON, e.g. \'{"body": "..."}\'; - reads standard input')
    parser.add_argument("--model", type=Path, default=None, help=MODEL_HELP)
    parser.add_argument("--no-speculative", action="store_true", help=NO_SPECULATIVE_HELP)
    add_weights_option(parser)
    parser.set_defaults(func=_run_decide)
    profile = commands.add_parser(
        "profile", help="measure and store this machine's verify profile for a model's drafter (once per machine)",
        description="Measure how fast the model verifies drafted tokens on this machine and store it in Jev's\n"
        "cache folder ($JEV_CACHE_DIR, else ~/.cache/jev), so no later process measures it in the background.\n"
        "A profile already stored for this model and machine is kept. `make serve` runs this first.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    profile.add_argument("--model", type=Path, default=None, help=MODEL_HELP)
    add_weights_option(profile)
    profile.set_defaults(func=_run_profile)

def _run_decide(args: argparse.Namespace) -> int:
    from jev.decide.decider import Decider

    raw = sys.stdin.read() if args.input == "-" else args.input
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise JevError(f"the input is not JSON: {exc}") from exc
    decider = Decider.load(model_folder(args.model), speculative=not args.no_speculative, weights=args.weights)
    result = decider.decide(args.task, data)
    print(result.model_dump_json(indent=2))
    return 0


def _run_profile(args: argparse.Namespace) -> int:
    from jev.decide.decider import load_apart
    from jev.generate.profiles import cache_dir

    folder = model_folder(args.model)
    # As `jev serve` decodes; loaded apart, so the profile is measured with no other thread's team beside it.
    decider = load_apart(folder, weights=args.weights, replay=True)
    if decider.drafter is None:
        print(f"{folder} has no drafter: its text fields decode plainly, there is nothing to profile")
    elif decider.profiling is None:
        print(f"a verify profile of {folder} on this machine is stored already (in {cache_dir()})")
    elif decider.profiling.wait() is None:
        raise JevError(f"measuring the verify profile failed: {decider.profiling.error}")
    else:
        one = decider.profiling.profile.seconds[0][0]
        print(f"stored the verify profile of {folder} in {cache_dir()}: {1 / one:.1f} passes/s for one token")
    return 0

