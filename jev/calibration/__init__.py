"""Calibration of decision-head probabilities: calibrators, metrics, policies and reports.

Only numpy, scikit-learn and matplotlib are used here, so calibration can be fitted, checked and
served without torch. `write_report` loads on first use: it draws with matplotlib, which applying
calibrators (what a server does) never needs, so a serving install goes without it.
"""

from typing import Any

from jev.calibration.calibrators import (
    Calibrator,
    IsotonicCalibration,
    MultiLabelCalibrator,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
    calibrator_from_dict,
    make_calibrator,
)
from jev.calibration.metrics import (
    METRICS,
    ConfidenceInterval,
    accuracy,
    bootstrap_ci,
    brier,
    classwise_ece,
    ece,
    ece_equal_mass,
    ece_floor,
    field_report,
    macro_f1,
    mce,
    nll,
    risk_coverage,
)
from jev.calibration.policies import (
    AbstainPolicy,
    Abstention,
    Answer,
    ConformalPolicy,
    PredictionSet,
    threshold_for_precision,
)

__all__ = [
    "METRICS",
    "AbstainPolicy",
    "Abstention",
    "Answer",
    "Calibrator",
    "ConfidenceInterval",
    "ConformalPolicy",
    "IsotonicCalibration",
    "MultiLabelCalibrator",
    "PlattScaling",
    "PredictionSet",
    "TemperatureScaling",
    "VectorScaling",
    "accuracy",
    "bootstrap_ci",
    "brier",
    "calibrator_from_dict",
    "classwise_ece",
    "ece",
    "ece_equal_mass",
    "ece_floor",
    "field_report",
    "macro_f1",
    "make_calibrator",
    "mce",
    "nll",
    "risk_coverage",
    "threshold_for_precision",
    "write_report",
]


def __getattr__(name: str) -> Any:
    if name == "write_report":
        from jev.calibration.report import write_report

        return write_report
    raise AttributeError(f"module 'jev.calibration' has no attribute {name!r}")
