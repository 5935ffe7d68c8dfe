"""`jev calibrate` and `jev report`: the command lines over `jev.evaluate.calibrate` and `jev.evaluate.report`."""

import argparse
from pathlib import Path

from jev.data.examples import ROW_FORMAT
from jev.decide.calibration import METHODS
from jev.evaluate.calibrate import calibrate
from jev.evaluate.report import ReportSettings, build_report


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Register `calibrate` and `report`; each handler is stored as `args.func` and returns an exit code."""
    _add_calibrate(commands)
    _add_report(commands)


def _add_calibrate(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "calibrate", help="fit a task's calibrators on held-out data and store them",
        description="Fit one calibrator per closed field of a task on rows the model was not trained on and\n"
        "store them in the model's jev.json: there is no --out, the model folder is updated in place,\n"
        "and every later decision of the task uses them.",
        epilog=ROW_FORMAT, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", type=Path, required=True, help="decider folder; its jev.json is updated")
    parser.add_argument("--task", required=True, help="the task's name in the model, e.g. mail")
    parser.add_argument("--data", type=Path, required=True, help="held-out JSONL rows (the calibration split)")
    parser.add_argument("--method", choices=METHODS, default="vector",
                        help="calibrator: temperature and vector (temperature plus a bias per value) fit every "
                        "field; platt and isotonic fit binary and multi-label fields, the others then use "
                        "temperature (default: %(default)s)")
    parser.add_argument("--target-precision", type=float, default=None,
                        help="also report the abstain threshold reaching this precision and the coverage it leaves "
                        "(default: not reported)")
    parser.set_defaults(func=_run_calibrate)

def _run_calibrate(args: argparse.Namespace) -> int:
    calibration = calibrate(args.model, args.task, args.data, args.method, args.target_precision)
    print(f"calibrated task {args.task!r} of {args.model} on {calibration.data['rows']} rows ({args.method})")
    for name, numbers in calibration.metrics.items():
        before, after = numbers["before"], numbers["after"]
        print(f"  {name}: ECE {before['ece']:.4f} -> {after['ece']:.4f}, NLL {before['nll']:.4f} -> {after['nll']:.4f}")
    for name, threshold in calibration.thresholds.items():
        if threshold["reached"]:
            print(f"  {name}: abstain below {threshold['threshold']:.3f} for precision "
                  f"{threshold['target_precision']:.3f}; answers {100 * threshold['coverage']:.1f}% of inputs")
        else:
            print(f"  {name}: precision {threshold['target_precision']} not reachable: {threshold['reason']}")
    return 0


def _add_report(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="quality and calibration of a task on labelled data, as report.html + metrics.json",
        description="Per closed field: accuracy, NLL, Brier, ECE and more before/after calibration with\n"
        "bootstrap intervals, figures, conformal coverage, and optionally the TF-IDF and MiniLM baselines\n"
        "beside Jev.",
        epilog=ROW_FORMAT, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", type=Path, required=True, help="decider folder")
    parser.add_argument("--task", required=True, help="the task's name in the model, e.g. mail")
    parser.add_argument("--data", type=Path, required=True, help="labelled JSONL rows to evaluate (the test split)")
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for report.html, metrics.json and PNGs (created if missing)")
    parser.add_argument("--baseline-train", type=Path, default=None,
                        help="train split for the baselines, given with --baseline-calib (default: no baseline)")
    parser.add_argument("--baseline-calib", type=Path, default=None,
                        help="calibration split for the baselines, given with --baseline-train (default: no baseline)")
    parser.add_argument("--baseline-valid", type=Path, default=None,
                        help="valid split on which the MiniLM baseline picks C; given with the two above, adds "
                        "all-MiniLM-L6-v2 embeddings + LogisticRegression beside TF-IDF (default: TF-IDF only)")
    parser.add_argument("--n-boot", type=int, default=1000,
                        help="bootstrap resamples per interval (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap resamples (default: %(default)s)")
    parser.add_argument("--skip-invalid", action="store_true",
                        help="drop rows that fail validation (default: any invalid row stops the run)")
    parser.set_defaults(func=_run_report)

def _run_report(args: argparse.Namespace) -> int:
    settings = ReportSettings(
        model=args.model,
        task=args.task,
        data=args.data,
        out=args.out,
        baseline_train=args.baseline_train,
        baseline_calib=args.baseline_calib,
        baseline_valid=args.baseline_valid,
        n_boot=args.n_boot,
        seed=args.seed,
        skip_invalid=args.skip_invalid,
    )
    path = build_report(settings)
    print(f"wrote {path} (metrics.json and figures beside it)")
    return 0
