"""Quality and calibration metrics of one field: probabilities `[n, K]` against labels `[n]`.

Standard scores come from scikit-learn (accuracy, macro-F1, log-loss, binary Brier) so Jev's
numbers mean what everyone else's mean. The calibration errors are written here because
scikit-learn has none; they bin exactly like `sklearn.calibration.calibration_curve` (right-closed
equal-width bins), so a reliability diagram drawn with it shows the same bins the ECE summed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from sklearn.metrics import accuracy_score, brier_score_loss, f1_score, log_loss

from jev.calibration._validation import check_distribution, check_labels

N_BINS = 15

Metric = Callable[[np.ndarray, np.ndarray], float]


class BinStats(NamedTuple):
    """Per-bin sample count, mean confidence and mean outcome (empty bins hold zeros)."""

    count: np.ndarray
    mean_confidence: np.ndarray
    mean_outcome: np.ndarray


class ConfidenceInterval(NamedTuple):
    """A point estimate on the full sample and a percentile-bootstrap interval around it."""

    value: float
    low: float
    high: float


def _normalised(probs: object) -> np.ndarray:
    """Checked rows, renormalised to sum exactly to one, as `log_loss` insists."""
    dist = check_distribution(probs)
    return dist / dist.sum(axis=1, keepdims=True)


def _checked(probs: object, y: object) -> tuple[np.ndarray, np.ndarray]:
    """Normalised rows and checked labels."""
    dist = _normalised(probs)
    return dist, check_labels(y, dist.shape[0], dist.shape[1])


def _top_label(probs: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Confidence of the predicted value and whether that value was right."""
    predicted = probs.argmax(axis=1)
    return probs.max(axis=1), (predicted == y).astype(np.float64)


def _bin_stats(bin_ids: np.ndarray, confidence: np.ndarray, outcome: np.ndarray, n_bins: int) -> BinStats:
    count = np.bincount(bin_ids, minlength=n_bins)
    safe = np.maximum(count, 1)
    return BinStats(
        count=count,
        mean_confidence=np.bincount(bin_ids, weights=confidence, minlength=n_bins) / safe,
        mean_outcome=np.bincount(bin_ids, weights=outcome, minlength=n_bins) / safe,
    )


def equal_width_bins(confidence: np.ndarray, outcome: np.ndarray, n_bins: int = N_BINS) -> BinStats:
    """Bins `(i/M, (i+1)/M]` (0 falls in the first), the rule `calibration_curve` uses."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    return _bin_stats(np.searchsorted(edges[1:-1], confidence), confidence, outcome, n_bins)


def equal_mass_bins(confidence: np.ndarray, outcome: np.ndarray, n_bins: int = N_BINS) -> BinStats:
    """Bins of equal sample count (±1) in order of confidence; ties keep their input order.

    Equal-width bins leave most bins nearly empty when a model is confident, so their ECE is
    dominated by one or two bins; equal mass gives every bin the same weight of evidence.
    """
    order = np.argsort(confidence, kind="stable")
    bin_ids = np.empty(confidence.shape[0], dtype=np.int64)
    bin_ids[order] = np.arange(confidence.shape[0]) * n_bins // confidence.shape[0]
    return _bin_stats(bin_ids, confidence, outcome, n_bins)


def _expected_gap(stats: BinStats) -> float:
    weights = stats.count / stats.count.sum()
    return float(np.sum(weights * np.abs(stats.mean_outcome - stats.mean_confidence)))


def accuracy(probs: object, y: object) -> float:
    """Share of samples whose most probable value is the label."""
    dist, labels = _checked(probs, y)
    return float(accuracy_score(labels, dist.argmax(axis=1)))


def macro_f1(probs: object, y: object) -> float:
    """Unweighted mean F1 over the values present in labels or predictions, so rare values count."""
    dist, labels = _checked(probs, y)
    return float(f1_score(labels, dist.argmax(axis=1), average="macro", zero_division=0))


def nll(probs: object, y: object) -> float:
    """Mean negative log-likelihood; labels are passed explicitly so absent values still count."""
    dist, labels = _checked(probs, y)
    return float(log_loss(labels, dist, labels=np.arange(dist.shape[1])))


def brier(probs: object, y: object) -> float:
    """Binary: mean (p_true_value_1 - y)^2 (scikit-learn). K > 2: mean of sum_k (p_k - onehot_k)^2.

    The two conventions differ by a factor of 2 on binary data; each is the usual one for its case.
    """
    dist, labels = _checked(probs, y)
    if dist.shape[1] == 2:
        return float(brier_score_loss(labels, dist[:, 1], pos_label=1))
    onehot = np.eye(dist.shape[1])[labels]
    return float(np.mean(np.sum((dist - onehot) ** 2, axis=1)))


def ece(probs: object, y: object, n_bins: int = N_BINS) -> float:
    """Top-label expected calibration error over equal-width bins (Guo et al. 2017, M = 15)."""
    dist, labels = _checked(probs, y)
    return _expected_gap(equal_width_bins(*_top_label(dist, labels), n_bins))


def ece_equal_mass(probs: object, y: object, n_bins: int = N_BINS) -> float:
    """Top-label expected calibration error over equal-mass bins (adaptive ECE)."""
    dist, labels = _checked(probs, y)
    return _expected_gap(equal_mass_bins(*_top_label(dist, labels), n_bins))


def mce(probs: object, y: object, n_bins: int = N_BINS) -> float:
    """Largest |accuracy - confidence| over non-empty equal-width bins: the worst promise broken."""
    dist, labels = _checked(probs, y)
    stats = equal_width_bins(*_top_label(dist, labels), n_bins)
    filled = stats.count > 0
    return float(np.max(np.abs(stats.mean_outcome[filled] - stats.mean_confidence[filled])))


def classwise_ece(probs: object, y: object, n_bins: int = N_BINS) -> float:
    """Mean over values k of the ECE of p_k against [y == k]: calibration of every value, not just the top."""
    dist, labels = _checked(probs, y)
    per_value = [
        _expected_gap(equal_width_bins(dist[:, k], (labels == k).astype(np.float64), n_bins))
        for k in range(dist.shape[1])
    ]
    return float(np.mean(per_value))


def risk_coverage(probs: object, y: object) -> tuple[np.ndarray, np.ndarray]:
    """Coverage k/n and error rate among the k most confident answers, for k = 1..n.

    This is what an abstain threshold trades: answering fewer questions should make fewer errors.
    """
    dist, labels = _checked(probs, y)
    confidence, hits = _top_label(dist, labels)
    order = np.argsort(-confidence, kind="stable")
    answered = np.arange(1, labels.shape[0] + 1)
    risk = np.cumsum(1.0 - hits[order]) / answered
    return answered / labels.shape[0], risk


METRICS: dict[str, Metric] = {
    "accuracy": accuracy,
    "macro_f1": macro_f1,
    "nll": nll,
    "brier": brier,
    "ece": ece,
    "ece_equal_mass": ece_equal_mass,
    "mce": mce,
    "classwise_ece": classwise_ece,
}


def _bootstrap_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def _interval(value: float, replicates: list[float], alpha: float) -> ConfidenceInterval:
    low, high = np.quantile(replicates, [alpha / 2.0, 1.0 - alpha / 2.0])
    return ConfidenceInterval(value=value, low=float(low), high=float(high))


def bootstrap_ci(
    metric_fn: Metric, probs: object, y: object, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
) -> ConfidenceInterval:
    """Percentile bootstrap interval of `metric_fn` over resampled samples.

    The same seed gives the same resamples for every metric and for raw vs calibrated
    probabilities, so before/after intervals are paired rather than independently noisy.
    """
    dist, labels = _checked(probs, y)
    if n_boot < 1 or not 0.0 < alpha < 1.0:
        raise ValueError(f"need n_boot >= 1 and 0 < alpha < 1, got n_boot={n_boot}, alpha={alpha}")
    replicates = [metric_fn(dist[i], labels[i]) for i in _bootstrap_indices(labels.shape[0], n_boot, seed)]
    return _interval(metric_fn(dist, labels), replicates, alpha)


def ece_floor(
    probs: object, n_draws: int = 200, alpha: float = 0.1, seed: int = 0, n_bins: int = N_BINS
) -> ConfidenceInterval:
    """The ECE that perfectly calibrated probabilities still show on this many rows: the mean, and a
    central 1 - alpha interval, of `ece(probs, y)` over labels y drawn from `probs` itself.

    ECE is biased upwards on a finite sample, the more so the more its confidences spread over
    bins: a measured ECE inside this interval is no evidence of miscalibration, and a goal below
    it cannot be told apart from noise at this sample size.
    """
    dist = _normalised(probs)
    if n_draws < 1 or not 0.0 < alpha < 1.0:
        raise ValueError(f"need n_draws >= 1 and 0 < alpha < 1, got n_draws={n_draws}, alpha={alpha}")
    uniforms = np.random.default_rng(seed).random((n_draws, dist.shape[0], 1))
    cumulative = np.cumsum(dist, axis=1)
    draws = np.minimum((uniforms >= cumulative).sum(axis=2), dist.shape[1] - 1)
    replicates = [ece(dist, labels, n_bins) for labels in draws]
    return _interval(float(np.mean(replicates)), replicates, alpha)


def field_report(probs: object, y: object, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0) -> dict[str, Any]:
    """Every metric in `METRICS` with its bootstrap interval, as plain JSON numbers."""
    dist, labels = _checked(probs, y)
    metrics = {
        name: bootstrap_ci(fn, dist, labels, n_boot=n_boot, alpha=alpha, seed=seed)._asdict()
        for name, fn in METRICS.items()
    }
    return {
        "n": int(labels.shape[0]),
        "n_values": int(dist.shape[1]),
        "n_boot": n_boot,
        "alpha": alpha,
        "metrics": metrics,
    }
