"""What to return once probabilities are calibrated: an answer, an abstention, or a set of values.

A calibrated probability only helps a caller who acts on it. `AbstainPolicy` answers only when
the top value is likely enough, `ConformalPolicy` returns a set of values with a coverage promise,
and `threshold_for_precision` turns a precision target into an abstain threshold on calibration
data. Abstaining is an ordinary result object, never an exception: it is an expected outcome.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Self

import numpy as np

from jev.calibration._validation import check_distribution, check_labels


@dataclass(frozen=True)
class Answer:
    """The policy answers with value `index`, whose calibrated probability is `probability`."""

    index: int
    probability: float


@dataclass(frozen=True)
class Abstention:
    """The policy declines: the best value `top_index` had `top_probability` < `threshold`."""

    top_index: int
    top_probability: float
    threshold: float


@dataclass(frozen=True)
class PredictionSet:
    """Values that together contain the true one with probability >= `coverage` (marginally)."""

    indices: tuple[int, ...]
    coverage: float


def _check_unit_interval(name: str, value: float, *, closed: bool) -> float:
    value = float(value)
    inside = 0.0 <= value <= 1.0 if closed else 0.0 < value < 1.0
    if not inside:
        bounds = "[0, 1]" if closed else "(0, 1)"
        raise ValueError(f"{name} must lie in {bounds}, got {value}")
    return value


class AbstainPolicy:
    """Answer with the top value when its calibrated probability >= `threshold`, else abstain."""

    name = "abstain"

    def __init__(self, threshold: float) -> None:
        self.threshold = _check_unit_interval("threshold", threshold, closed=True)

    def answered(self, probs: object) -> np.ndarray:
        """Boolean mask [n]: which samples get an answer."""
        return check_distribution(probs).max(axis=1) >= self.threshold

    def decide(self, probs: object) -> list[Answer | Abstention]:
        """One `Answer` or `Abstention` per row of calibrated probabilities [n, K]."""
        dist = check_distribution(probs)
        top = dist.argmax(axis=1)
        confidence = dist[np.arange(dist.shape[0]), top]
        return [
            Answer(int(k), float(p)) if p >= self.threshold else Abstention(int(k), float(p), self.threshold)
            for k, p in zip(top, confidence, strict=True)
        ]

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.name, "threshold": self.threshold}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        if d.get("policy") != cls.name:
            raise ValueError(f"expected policy={cls.name!r}, got {d.get('policy')!r}")
        return cls(threshold=float(d["threshold"]))


class ConformalPolicy:
    """Split conformal prediction sets with the LAC score s = 1 - p_true (Sadinle et al. 2019).

    On exchangeable data, P(y in set) >= coverage over the draw of calibration and test samples;
    this is marginal coverage, not per-input. The set is {k : 1 - p_k <= qhat}, where qhat is the
    ceil((n+1) * coverage)-th smallest calibration score; when that rank exceeds n the calibration
    split is too small to promise the coverage and qhat = 1 (every value is kept). LAC gives the
    smallest average sets but may return an empty set when no value is plausible enough.
    """

    name = "conformal"

    def __init__(self, coverage: float = 0.9) -> None:
        self.coverage = _check_unit_interval("coverage", coverage, closed=False)

    def fit(self, probs: object, y: object) -> Self:
        dist = check_distribution(probs)
        labels = check_labels(y, dist.shape[0], dist.shape[1])
        scores = np.sort(1.0 - dist[np.arange(labels.shape[0]), labels])
        n = scores.shape[0]
        rank = math.ceil((n + 1) * self.coverage)
        self.qhat_ = float(scores[rank - 1]) if rank <= n else 1.0
        self.n_samples_ = int(n)
        self.fitted_at_ = datetime.now(UTC).isoformat(timespec="seconds")
        return self

    def predict_sets(self, probs: object) -> np.ndarray:
        """Boolean mask [n, K]: value k is in sample i's set."""
        self._check_fitted()
        return 1.0 - check_distribution(probs) <= self.qhat_

    def predict(self, probs: object) -> list[PredictionSet]:
        """One `PredictionSet` per row, carrying the promised coverage."""
        return [
            PredictionSet(tuple(int(k) for k in np.flatnonzero(row)), self.coverage) for row in self.predict_sets(probs)
        ]

    def to_dict(self) -> dict[str, Any]:
        self._check_fitted()
        return {
            "policy": self.name,
            "coverage": self.coverage,
            "qhat": self.qhat_,
            "n_samples": self.n_samples_,
            "fitted_at": self.fitted_at_,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        if d.get("policy") != cls.name:
            raise ValueError(f"expected policy={cls.name!r}, got {d.get('policy')!r}")
        policy = cls(coverage=float(d["coverage"]))
        policy.qhat_ = float(d["qhat"])
        policy.n_samples_ = int(d["n_samples"])
        policy.fitted_at_ = str(d["fitted_at"])
        return policy

    def _check_fitted(self) -> None:
        if not hasattr(self, "qhat_"):
            raise RuntimeError("ConformalPolicy is not fitted: call fit(probs, y) on calibration data first")


def threshold_for_precision(probs: object, y: object, target_precision: float) -> tuple[float, float]:
    """Smallest threshold t whose answered subset {top p >= t} reaches `target_precision`.

    Returns (t, coverage). Only observed top confidences are candidates: any t between two of them
    answers the same subset, and the observed value is the smallest such t. Raises when no
    threshold reaches the target, naming the best precision that was reachable.
    """
    target = _check_unit_interval("target_precision", target_precision, closed=True)
    dist = check_distribution(probs)
    labels = check_labels(y, dist.shape[0], dist.shape[1])
    confidence = dist.max(axis=1)
    order = np.argsort(-confidence, kind="stable")
    sorted_conf = confidence[order]
    hits = (dist.argmax(axis=1) == labels)[order]
    precision = np.cumsum(hits) / np.arange(1, labels.shape[0] + 1)
    # A threshold answers every tie of its value, so only the last index of each tie run counts.
    run_ends = np.append(sorted_conf[1:] != sorted_conf[:-1], True)
    reaching = np.flatnonzero(run_ends & (precision >= target))
    if reaching.size == 0:
        best = int(np.argmax(np.where(run_ends, precision, -1.0)))
        raise ValueError(
            f"no threshold reaches precision {target} on {labels.shape[0]} calibration samples; the best "
            f"is {precision[best]:.4f} at threshold {sorted_conf[best]:.4f}"
        )
    last = int(reaching[-1])
    return float(sorted_conf[last]), (last + 1) / labels.shape[0]
