"""`jev report`: a decider's quality and calibration on a labelled split, as a page a person can read.

    jev report --model DIR --task mail --data test.jsonl --out reports/mail \\
        [--baseline-train train.jsonl --baseline-calib calib.jsonl [--baseline-valid valid.jsonl]] [--n-boot 1000]

The numbers are computed here once, from the same raw and calibrated probabilities a served
decision would get, and written by `jev.calibration.write_report` as report.html (images
embedded), metrics.json and PNGs. The header says exactly which weights, schema, calibration and
data produced them, so a report can be checked against a model long after it was written.

The baselines (`jev.evaluate.baseline`) are trained on other splits and scored on the same rows: the
TF-IDF anchor from the train and calib splits, and with a valid split also the MiniLM anchor,
which picks its C there.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from jev.calibration import Calibrator, MultiLabelCalibrator
from jev.decide.calibration import TaskCalibration
from jev.decide.decider import Decider
from jev.decide.kinds import kind_of
from jev.digest import file_sha256
from jev.evaluate.baseline import (
    C_GRID,
    MINILM_NAME,
    TFIDF_C,
    TFIDF_NAME,
    BaselineProbabilities,
    baseline_probabilities,
    minilm_probabilities,
    read_labelled_texts,
    read_with_texts,
)
from jev.evaluate.calibrate import file_identity, raw_probabilities
from jev.evaluate.minilm import PACKAGE as MINILM_PACKAGE
from jev.evaluate.minilm import MiniLMEncoder, minilm_version, minilm_zip
from jev.schema import FieldSpec, JevError, Task


@dataclass(frozen=True)
class ReportSettings:
    """What `jev report` evaluates and where it writes.

    TF-IDF runs when both baseline_train and baseline_calib are given; MiniLM also when baseline_valid is.
    """

    model: Path
    task: str
    data: Path
    out: Path
    baseline_train: Path | None = None
    baseline_calib: Path | None = None
    baseline_valid: Path | None = None
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
    if not kind_of(spec).multilabel:
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


@dataclass(frozen=True)
class Anchor:
    """One baseline as the report shows it: its name, per-field probabilities, and what produced them."""

    name: str
    probabilities: dict[str, BaselineProbabilities]
    header: dict[str, Any]


def _anchors(task: Task, settings: ReportSettings, test_texts: list[str]) -> list[Anchor]:
    if settings.baseline_train is None and settings.baseline_calib is None and settings.baseline_valid is None:
        return []
    if settings.baseline_train is None or settings.baseline_calib is None:
        raise JevError(
            "the baselines need both --baseline-train and --baseline-calib (and --baseline-valid for MiniLM)"
        )
    train = read_labelled_texts(settings.baseline_train, task, settings.skip_invalid)
    calib = read_labelled_texts(settings.baseline_calib, task, settings.skip_invalid)
    splits = {"train": file_identity(settings.baseline_train), "calib": file_identity(settings.baseline_calib)}
    tfidf = baseline_probabilities(task, train, calib, test_texts)
    anchors = [Anchor(TFIDF_NAME, tfidf, {"model": TFIDF_NAME, "C": TFIDF_C, **splits})]
    if settings.baseline_valid is None:
        return anchors
    valid = read_labelled_texts(settings.baseline_valid, task, settings.skip_invalid)
    weights = minilm_zip()
    minilm = minilm_probabilities(task, train, valid, calib, test_texts, MiniLMEncoder.load(weights).encode)
    header = {
        "model": MINILM_NAME,
        "C_grid": list(C_GRID),
        "C_picked_by": "log-loss on valid, per field",
        "weights": {"package": MINILM_PACKAGE, "version": minilm_version(), "file": weights.name,
                    "sha256": file_sha256(weights)},
        **splits,
        "valid": file_identity(settings.baseline_valid),
    }
    return [*anchors, Anchor(MINILM_NAME, minilm, header)]


def _baseline_view(anchor: Anchor, name: str) -> dict[str, Any]:
    """One field's entry of one baseline, in the form `write_report` reads; the name says the C it used."""
    probs = anchor.probabilities[name]
    return {
        "name": f"{anchor.name} (C={probs.C:g})",
        "raw": probs.raw,
        "calibrated": probs.calibrated,
        "method": probs.method,
        "note": probs.note,
    }


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
    anchors = _anchors(task, settings, texts)
    fields: dict[str, dict[str, Any]] = {}
    for spec in task.spec.closed_fields:
        y = np.array([e.label[spec.name] for e in examples])
        for name, view in field_views(spec, raw[spec.name], calibrated[spec.name], y).items():
            policy = calibration.conformal.get(name) if calibration else None
            fields[name] = {**view, "conformal": policy, "baselines": [_baseline_view(a, name) for a in anchors]}
    header = {
        "model": decider.model_id,
        "task": task.name,
        "schema_hash": task.spec.hash,
        "data": {**file_identity(settings.data), "rows_evaluated": len(examples), "rows_skipped": len(skipped)},
        "calibration": calibration_header(calibration),
        "baselines": [a.header for a in anchors],
    }
    title = f"Jev report: task {task.name}"
    from jev.calibration import write_report  # matplotlib, which only reports need (the train extra)

    return write_report(fields, settings.out, n_boot=settings.n_boot, seed=settings.seed, header=header, title=title)
