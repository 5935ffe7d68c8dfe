"""`fit_calibration` with `jev calibrate`'s default method on every closed kind, through JSON and back."""

import json
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, Field

from jev.decide.calibration import TaskCalibration, fit_calibration
from jev.schema import Task


class Note(BaseModel):
    text: str


class Triage(BaseModel):
    team: Literal["billing", "tech", "sales"]
    urgent: bool
    severity: Annotated[int, Field(ge=1, le=4)]
    tags: set[Literal["refund", "bug", "login"]]


TRIAGE = Task(name="triage", input_model=Note, decision_model=Triage, description="Route a note.")


def _raw_and_labels(rows: int, seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Over-confident heads: labels drawn from each row's probabilities flattened by a temperature of 2."""
    rng = np.random.default_rng(seed)
    raw, labels = {}, {}
    for spec in TRIAGE.spec.closed_fields:
        if spec.kind == "multilabel":
            p = rng.uniform(0.02, 0.98, size=(rows, spec.n_values))
            truth = 1 / (1 + np.exp(-np.log(p / (1 - p)) / 2))
            raw[spec.name], labels[spec.name] = p, (rng.random(p.shape) < truth).astype(np.int64)
        else:
            p = rng.dirichlet(np.full(spec.n_values, 0.3), size=rows).clip(1e-6)
            p /= p.sum(1, keepdims=True)
            truth = np.sqrt(p) / np.sqrt(p).sum(1, keepdims=True)
            raw[spec.name] = p
            labels[spec.name] = np.array([rng.choice(spec.n_values, p=row) for row in truth])
    return raw, labels


def test_default_method_calibrates_every_closed_kind_and_round_trips() -> None:
    raw, labels = _raw_and_labels(1500, seed=0)
    calibration = fit_calibration(TRIAGE, raw, labels)
    assert calibration.method == "vector"
    assert {name: c.name for name, c in calibration.calibrators.items()} == {
        "team": "vector", "urgent": "vector", "severity": "vector", "tags": "multilabel"
    }
    for name, numbers in calibration.metrics.items():  # over-confident heads: NLL must fall on the fit rows
        assert numbers["after"]["nll"] < numbers["before"]["nll"], name
    restored = TaskCalibration.from_dict(json.loads(json.dumps(calibration.to_dict())))
    held_raw, _ = _raw_and_labels(200, seed=1)
    for spec in TRIAGE.spec.closed_fields:
        probs = calibration.apply(spec, held_raw[spec.name])
        assert probs.shape == held_raw[spec.name].shape and np.all((probs >= 0) & (probs <= 1))
        if spec.kind != "multilabel":
            np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-9)
        np.testing.assert_array_equal(restored.apply(spec, held_raw[spec.name]), probs)
