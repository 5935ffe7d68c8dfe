"""A task's calibration: per-field calibrators and conformal sets, fitted on held-out rows.

Fitted by `jev calibrate` on the calibration split (which the model never trained on), stored in
`jev.json` as plain numbers, and applied by the `Decider` to every decision's raw head
probabilities. `--method` picks the calibrator. Fields with more than two values take it when it
calibrates a whole distribution (`vector`: a temperature and a bias per value, which can move the
argmax), and temperature scaling, which keeps the argmax, for the one-probability methods (Platt,
isotonic).
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from jev.calibration import (
    ConformalPolicy,
    calibrator_from_dict,
    ece,
    make_calibrator,
    nll,
    threshold_for_precision,
)
from jev.calibration.calibrators import METHODS, Calibrator
from jev.decide.kinds import kind_of
from jev.schema import FieldSpec, Task

DEFAULT_COVERAGE = 0.9


@dataclass
class TaskCalibration:
    """Everything `jev calibrate` learned for one task."""

    method: str
    calibrators: dict[str, Calibrator]
    conformal: dict[str, ConformalPolicy]
    data: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    thresholds: dict[str, Any] = field(default_factory=dict)
    fitted_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    def apply(self, spec: FieldSpec, probs: np.ndarray) -> np.ndarray:
        """Calibrated probabilities of one field, the same shape as the raw ones."""
        calibrator = self.calibrators.get(spec.name)
        return probs if calibrator is None else np.asarray(calibrator.predict_proba(probs), dtype=np.float64)

    def identity(self) -> dict[str, Any]:
        """What a response says about the calibration that produced it."""
        return {"method": self.method, "fitted_at": self.fitted_at, "data_sha256": self.data.get("sha256")}

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "fitted_at": self.fitted_at,
            "data": self.data,
            "fields": {name: c.to_dict() for name, c in self.calibrators.items()},
            "conformal": {name: p.to_dict() for name, p in self.conformal.items()},
            "metrics": self.metrics,
            "thresholds": self.thresholds,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "TaskCalibration":
        return cls(
            method=raw["method"],
            calibrators={name: calibrator_from_dict(d) for name, d in raw["fields"].items()},
            conformal={name: ConformalPolicy.from_dict(d) for name, d in raw.get("conformal", {}).items()},
            data=raw.get("data", {}),
            metrics=raw.get("metrics", {}),
            thresholds=raw.get("thresholds", {}),
            fitted_at=raw["fitted_at"],
        )


def fit_calibration(
    task: Task,
    raw: dict[str, np.ndarray],
    labels: dict[str, np.ndarray],
    method: str = "vector",
    target_precision: float | None = None,
) -> TaskCalibration:
    """Fit every closed field's calibrator and conformal sets on held-out probabilities and labels."""
    if method not in METHODS:
        raise ValueError(f"unknown calibration method {method!r}; use one of {METHODS}")
    calibrators, conformal, metrics, thresholds = {}, {}, {}, {}
    for spec in task.spec.closed_fields:
        probs, y = raw[spec.name], labels[spec.name]
        kind = kind_of(spec)
        calibrator = make_calibrator(kind.calibration_method(spec.n_values, method), spec.kind, spec.n_values)
        calibrator.fit(probs, y)
        calibrators[spec.name] = calibrator
        if kind.multilabel:
            continue
        calibrated = np.asarray(calibrator.predict_proba(probs))
        policy = task.policies.get(spec.name)
        coverage = policy.conformal_coverage if policy and policy.conformal_coverage else DEFAULT_COVERAGE
        conformal[spec.name] = ConformalPolicy(coverage).fit(calibrated, y)
        metrics[spec.name] = {
            "before": {"nll": nll(probs, y), "ece": ece(probs, y)},
            "after": {"nll": nll(calibrated, y), "ece": ece(calibrated, y)},
        }
        if target_precision is not None:
            thresholds[spec.name] = _threshold(calibrated, y, target_precision)
    return TaskCalibration(method, calibrators, conformal, metrics=metrics, thresholds=thresholds)


def _threshold(probs: np.ndarray, y: np.ndarray, target: float) -> dict[str, Any]:
    try:
        threshold, coverage = threshold_for_precision(probs, y, target)
    except ValueError as exc:
        return {"target_precision": target, "reached": False, "reason": str(exc)}
    return {"target_precision": target, "reached": True, "threshold": threshold, "coverage": coverage}


def label_arrays(fields: Sequence[FieldSpec], labels: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Encoded labels per field: value indices `[n]`, or 0/1 per label `[n, L]` for multi-label fields."""
    return {spec.name: np.array([row[spec.name] for row in labels]) for spec in fields}
