"""`jev report`: a decider's quality and calibration on a labelled split, as a page a person can read.

    jev report --model DIR --task mail --data test.jsonl --out reports/mail \\
        [--baseline-train train.jsonl --baseline-calib calib.jsonl] [--n-boot 1000]

The numbers are computed here once, from the same raw and calibrated probabilities a served
decision would get, and written by `jev.calibration.write_report` as report.html (images
embedded), metrics.json and PNGs. The header says exactly which weights, schema, calibration and
data produced them, so a report can be checked against a model long after it was written.
"""

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from jev.calibration import Calibrator, MultiLabelCalibrator
from jev.engine.calibration import TaskCalibration
from jev.engine.decider import Decider
from jev.schema import FieldSpec, JevError, Task
from jev.train.baseline import TFIDF_NAME as BASELINE_NAME
from jev.train.baseline import BaselineProbabilities, baseline_probabilities, read_labelled_texts, read_with_texts
from jev.train.calibrate import file_identity, raw_probabilities
from jev.train.examples import ROW_FORMAT


@dataclass(frozen=True)
class ReportSettings:
    """What `jev report` evaluates and where it writes; the baseline runs when both of its splits are given."""

    model: Path
    task: str
    data: Path
    out: Path
    baseline_train: Path | None = None
    baseline_calib: Path | None = None
    n_boot: int = 1000
    seed: int = 0
    skip_invalid: bool = False


def _binary(probs: np.ndarray) -> np.ndarray:
    """One label's independent probability `[n]` as the distribution `[n, 2]` over (absent, present)."""
    return np.column_stack([1.0 - probs, probs])


def field_views(spec: FieldSpec, raw: np.ndarray, calibrated: np.ndarray, y: np.ndarray) -> dict[str, dict[str, Any]]:
    """The report's fields for one closed field: itself, or one binary field `name[label]` per label.

    A multi-label head scores each label independently, so each label is its own calibration problem.
    """
    if spec.kind != "multilabel":
        return {spec.name: {"raw": raw, "calibrated": calibrated, "y": y, "values": [str(v) for v in spec.values]}}
    return {
        f"{spec.name}[{label}]": {
            "raw": _binary(raw[:, j]),
            "calibrated": _binary(calibrated[:, j]),
            "y": y[:, j],
            "values": ["absent", "present"],
        }
        for j, label in enumerate(spec.values)
    }


def _calibrator_name(calibrator: Calibrator) -> str:
    """A calibrator's method; a multi-label field's also names the method of its per-label calibrators."""
    if isinstance(calibrator, MultiLabelCalibrator):
        return f"{calibrator.name} ({calibrator.method} per label)"
    return calibrator.name


def calibration_header(calibration: TaskCalibration | None) -> dict[str, Any] | str:
    """Which calibration produced the calibrated numbers: method, when, on which data, per-field method."""
    if calibration is None:
        return "not calibrated"
    return {
        "method": calibration.method,
        "fitted_at": calibration.fitted_at,
        "data_sha256": calibration.data.get("sha256", "not recorded"),
        "data_rows": calibration.data.get("rows", "not recorded"),
        "fields": {name: _calibrator_name(c) for name, c in calibration.calibrators.items()},
    }


def _baseline(
    task: Task, settings: ReportSettings, test_texts: list[str]
) -> tuple[dict[str, BaselineProbabilities], dict[str, Any]] | None:
    if settings.baseline_train is None and settings.baseline_calib is None:
        return None
    if settings.baseline_train is None or settings.baseline_calib is None:
        raise JevError("the baseline needs both --baseline-train and --baseline-calib")
    train = read_labelled_texts(settings.baseline_train, task, settings.skip_invalid)
    calib = read_labelled_texts(settings.baseline_calib, task, settings.skip_invalid)
    header = {
        "model": BASELINE_NAME,
        "train": file_identity(settings.baseline_train),
        "calib": file_identity(settings.baseline_calib),
    }
    return baseline_probabilities(task, train, calib, test_texts), header


def build_report(settings: ReportSettings) -> Path:
    """Evaluate the decider on `settings.data` and write the report; return the report.html path."""
    # Policies are not checked: a report must also show an uncalibrated model's raw numbers.
    decider = Decider.load(settings.model, check_policies=False)
    task = decider.task_for(settings.task)
    examples, texts, skipped = read_with_texts(
        settings.data, task, lambda t, d: decider.encode(t, d).token_ids, settings.skip_invalid
    )
    raw = raw_probabilities(decider, task, examples)
    calibrated = decider.calibrated(task, raw)
    calibration = decider.calibrations.get(task.name)
    baseline = _baseline(task, settings, texts)
    fields: dict[str, dict[str, Any]] = {}
    for spec in task.spec.closed_fields:
        y = np.array([e.label[spec.name] for e in examples])
        for name, view in field_views(spec, raw[spec.name], calibrated[spec.name], y).items():
            policy = calibration.conformal.get(name) if calibration else None
            fields[name] = {**view, "conformal": policy}
            if baseline is not None:
                probs = baseline[0][name]
                fields[name]["baseline"] = {
                    "name": BASELINE_NAME,
                    "raw": probs.raw,
                    "calibrated": probs.calibrated,
                    "method": probs.method,
                    "note": probs.note,
                }
    header = {
        "model": decider.model_id,
        "task": task.name,
        "schema_hash": task.spec.hash,
        "data": {**file_identity(settings.data), "rows_evaluated": len(examples), "rows_skipped": len(skipped)},
        "calibration": calibration_header(calibration),
        "baseline": None if baseline is None else baseline[1],
    }
    title = f"Jev report: task {task.name}"
    from jev.calibration import write_report  # matplotlib, which only reports need (the train extra)

    return write_report(fields, settings.out, n_boot=settings.n_boot, seed=settings.seed, header=header, title=title)


def add_report_command(subparsers: argparse._SubParsersAction) -> None:
    """Register `report`; its handler is stored as `args.func` and returns an exit code."""
    parser = subparsers.add_parser(
        "report",
        help="quality and calibration of a task on labelled data, as report.html + metrics.json",
        description="Per closed field: accuracy, NLL, Brier, ECE and more before/after calibration with\n"
        "bootstrap intervals, figures, conformal coverage, and optionally the TF-IDF baseline beside Jev.",
        epilog=ROW_FORMAT, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", type=Path, required=True, help="decider folder")
    parser.add_argument("--task", required=True, help="the task's name in the model, e.g. mail")
    parser.add_argument("--data", type=Path, required=True, help="labelled JSONL rows to evaluate (the test split)")
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for report.html, metrics.json and PNGs (created if missing)")
    parser.add_argument("--baseline-train", type=Path, default=None,
                        help="train split for the TF-IDF baseline, given with --baseline-calib (default: no baseline)")
    parser.add_argument("--baseline-calib", type=Path, default=None,
                        help="calibration split for the baseline, given with --baseline-train (default: no baseline)")
    parser.add_argument("--n-boot", type=int, default=1000,
                        help="bootstrap resamples per interval (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap resamples (default: %(default)s)")
    parser.add_argument("--skip-invalid", action="store_true",
                        help="drop rows that fail validation (default: any invalid row stops the run)")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    settings = ReportSettings(
        model=args.model,
        task=args.task,
        data=args.data,
        out=args.out,
        baseline_train=args.baseline_train,
        baseline_calib=args.baseline_calib,
        n_boot=args.n_boot,
        seed=args.seed,
        skip_invalid=args.skip_invalid,
    )
    path = build_report(settings)
    print(f"wrote {path} (metrics.json and figures beside it)")
    return 0
