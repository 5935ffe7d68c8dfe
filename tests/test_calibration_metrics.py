"""Metrics: every hand-written one against a slow pure-python loop, ECE against a hand-computed
example, and the calibrated / over-confident extremes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.calibration import calibration_curve

from jev.calibration import (
    METRICS,
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
from jev.calibration.metrics import equal_width_bins


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _sample(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    u = rng.random(probs.shape[0])[:, None]
    return np.minimum((probs.cumsum(axis=1) < u).sum(axis=1), probs.shape[1] - 1)


def _data(n: int, k: int, seed: int, sharpen: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Labels drawn from softmax(z); the model reports softmax(sharpen * z)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 1.5, size=(n, k))
    return _softmax(sharpen * z), _sample(_softmax(z), rng)


def _bin_of(c: float, n_bins: int) -> int:
    """Right-closed bins (i/M, (i+1)/M]; 0 belongs to the first, as in calibration_curve."""
    edges = np.linspace(0.0, 1.0, n_bins + 1).tolist()
    for i in range(n_bins):
        if c <= edges[i + 1]:
            return i
    return n_bins - 1


def _gaps_slow(conf: list[float], hit: list[float], bins: list[int], n_bins: int) -> list[tuple[int, float]]:
    out = []
    for b in range(n_bins):
        members = [i for i in range(len(conf)) if bins[i] == b]
        if members:
            acc = sum(hit[i] for i in members) / len(members)
            mean_conf = sum(conf[i] for i in members) / len(members)
            out.append((len(members), abs(acc - mean_conf)))
    return out


def _top_slow(probs: np.ndarray, y: np.ndarray) -> tuple[list[float], list[float]]:
    conf, hit = [], []
    for row, label in zip(probs.tolist(), y.tolist(), strict=True):
        best = max(range(len(row)), key=lambda k: (row[k], -k))
        conf.append(row[best])
        hit.append(1.0 if best == label else 0.0)
    return conf, hit


def ece_slow(probs: np.ndarray, y: np.ndarray, n_bins: int = 15) -> float:
    conf, hit = _top_slow(probs, y)
    gaps = _gaps_slow(conf, hit, [_bin_of(c, n_bins) for c in conf], n_bins)
    return sum(count * gap for count, gap in gaps) / len(conf)


def mce_slow(probs: np.ndarray, y: np.ndarray, n_bins: int = 15) -> float:
    conf, hit = _top_slow(probs, y)
    return max(gap for _, gap in _gaps_slow(conf, hit, [_bin_of(c, n_bins) for c in conf], n_bins))


def ece_equal_mass_slow(probs: np.ndarray, y: np.ndarray, n_bins: int = 15) -> float:
    conf, hit = _top_slow(probs, y)
    n = len(conf)
    order = sorted(range(n), key=lambda i: conf[i])  # sorted() is stable
    bins = [0] * n
    for rank, i in enumerate(order):
        bins[i] = rank * n_bins // n
    return sum(count * gap for count, gap in _gaps_slow(conf, hit, bins, n_bins)) / n


def classwise_ece_slow(probs: np.ndarray, y: np.ndarray, n_bins: int = 15) -> float:
    total = 0.0
    for k in range(probs.shape[1]):
        conf = [float(row[k]) for row in probs]
        hit = [1.0 if label == k else 0.0 for label in y.tolist()]
        gaps = _gaps_slow(conf, hit, [_bin_of(c, n_bins) for c in conf], n_bins)
        total += sum(count * gap for count, gap in gaps) / len(conf)
    return total / probs.shape[1]


def brier_slow(probs: np.ndarray, y: np.ndarray) -> float:
    total = 0.0
    for row, label in zip(probs.tolist(), y.tolist(), strict=True):
        total += sum((p - (1.0 if k == label else 0.0)) ** 2 for k, p in enumerate(row))
    return total / probs.shape[0]


def _with_edge_cases(probs: np.ndarray) -> np.ndarray:
    """Put some top confidences exactly on bin edges, where an off-by-one in binning would show."""
    probs = probs.copy()
    for i, edge in enumerate(np.linspace(0.0, 1.0, 16)[8:]):
        probs[i] = [edge, 1.0 - edge] + [0.0] * (probs.shape[1] - 2)
    return probs


@pytest.mark.parametrize(("k", "seed", "sharpen"), [(2, 0, 1.0), (4, 1, 2.5), (6, 2, 0.5)])
def test_hand_written_metrics_match_slow_loops(k: int, seed: int, sharpen: float) -> None:
    probs, y = _data(600, k, seed, sharpen)
    probs = _with_edge_cases(probs)
    assert ece(probs, y) == pytest.approx(ece_slow(probs, y), abs=1e-12)
    assert ece(probs, y, n_bins=7) == pytest.approx(ece_slow(probs, y, 7), abs=1e-12)
    assert mce(probs, y) == pytest.approx(mce_slow(probs, y), abs=1e-12)
    assert ece_equal_mass(probs, y) == pytest.approx(ece_equal_mass_slow(probs, y), abs=1e-12)
    assert classwise_ece(probs, y) == pytest.approx(classwise_ece_slow(probs, y), abs=1e-12)
    if k > 2:
        assert brier(probs, y) == pytest.approx(brier_slow(probs, y), abs=1e-12)


def test_ece_and_mce_on_a_hand_computed_example() -> None:
    # top confidences 0.9, 0.88 (bin 13), 0.85 (bin 12), 0.7 (bin 10), 0.55 (bin 8); right, right,
    # wrong, right, wrong. Bin 13: |1 - 0.89| = 0.11 with weight 2/5; the others 0.85, 0.3, 0.55.
    probs = np.array([[0.9, 0.1], [0.88, 0.12], [0.15, 0.85], [0.3, 0.7], [0.45, 0.55]])
    y = np.array([0, 0, 0, 1, 0])
    assert ece(probs, y) == pytest.approx((2 * 0.11 + 0.85 + 0.3 + 0.55) / 5)
    assert mce(probs, y) == pytest.approx(0.85)
    # With two bins everything is in (0.5, 1]: mean confidence 3.88 / 5, accuracy 3 / 5.
    assert ece(probs, y, n_bins=2) == pytest.approx(3.88 / 5 - 3 / 5)
    # Equal mass, 5 bins of one sample each: mean of the five per-sample gaps.
    assert ece_equal_mass(probs, y, n_bins=5) == pytest.approx((0.1 + 0.12 + 0.85 + 0.3 + 0.55) / 5)


def test_ece_is_small_when_calibrated_and_large_when_over_confident() -> None:
    calibrated, y = _data(20_000, 5, seed=3)
    over_confident, y2 = _data(20_000, 5, seed=3, sharpen=3.0)
    np.testing.assert_array_equal(y, y2)
    assert ece(calibrated, y) < 0.015
    assert ece_equal_mass(calibrated, y) < 0.015
    assert classwise_ece(calibrated, y) < 0.01
    assert ece(over_confident, y) > 0.15
    assert ece_equal_mass(over_confident, y) > 0.15
    assert mce(over_confident, y) > 0.2


def test_equal_width_bins_agree_with_calibration_curve() -> None:
    probs, y = _data(2000, 3, seed=4)
    conf, hit = probs.max(axis=1), (probs.argmax(axis=1) == y).astype(float)
    stats = equal_width_bins(conf, hit)
    prob_true, prob_pred = calibration_curve(hit, conf, n_bins=15)
    filled = stats.count > 0
    np.testing.assert_allclose(stats.mean_outcome[filled], prob_true, atol=1e-12)
    np.testing.assert_allclose(stats.mean_confidence[filled], prob_pred, atol=1e-12)


def test_scikit_learn_scores_on_small_examples() -> None:
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.6, 0.3, 0.1], [0.2, 0.2, 0.6]])
    y = np.array([0, 1, 1, 0])
    assert accuracy(probs, y) == 0.5
    # class 0: P=1/2, R=1/2; class 1: P=1, R=1/2; class 2: P=0, R=0 -> (1/2 + 2/3 + 0) / 3
    assert macro_f1(probs, y) == pytest.approx((0.5 + 2 / 3) / 3)
    # class 2 never occurs but stays a column: log_loss needs the explicit labels
    assert nll(probs, y) == pytest.approx(-(math.log(0.7) + math.log(0.8) + math.log(0.3) + math.log(0.2)) / 4)
    binary = np.array([[0.8, 0.2], [0.4, 0.6], [0.5, 0.5]])
    assert brier(binary, np.array([0, 1, 1])) == pytest.approx((0.2**2 + 0.4**2 + 0.5**2) / 3)


def test_risk_coverage_matches_a_loop() -> None:
    probs, y = _data(300, 4, seed=5)
    coverage, risk = risk_coverage(probs, y)
    conf, hit = _top_slow(probs, y)
    order = sorted(range(len(conf)), key=lambda i: -conf[i])
    for k in (1, 17, 150, 300):
        assert coverage[k - 1] == pytest.approx(k / 300)
        assert risk[k - 1] == pytest.approx(sum(1 - hit[i] for i in order[:k]) / k)


def test_bootstrap_ci_is_a_seeded_percentile_interval() -> None:
    probs, y = _data(400, 3, seed=6)
    interval = bootstrap_ci(accuracy, probs, y, n_boot=200, seed=1)
    rng = np.random.default_rng(1)
    replicates = []
    for _ in range(200):
        idx = rng.integers(0, 400, size=400)
        replicates.append(float(np.mean(probs[idx].argmax(axis=1) == y[idx])))
    replicates.sort()
    assert interval.value == accuracy(probs, y)
    assert interval.low == pytest.approx(np.quantile(replicates, 0.025))
    assert interval.high == pytest.approx(np.quantile(replicates, 0.975))
    assert interval.low < interval.value < interval.high
    assert bootstrap_ci(accuracy, probs, y, n_boot=200, seed=1) == interval
    wide = bootstrap_ci(accuracy, probs[:50], y[:50], n_boot=200, seed=1)
    assert wide.high - wide.low > interval.high - interval.low


def test_field_report_has_every_metric_with_its_interval() -> None:
    probs, y = _data(300, 3, seed=7)
    report = field_report(probs, y, n_boot=30, seed=2)
    assert report["n"] == 300 and report["n_values"] == 3
    assert set(report["metrics"]) == set(METRICS)
    for name, fn in METRICS.items():
        entry = report["metrics"][name]
        assert entry["value"] == pytest.approx(fn(probs, y), abs=1e-12)
        expected = bootstrap_ci(fn, probs, y, n_boot=30, seed=2)._asdict()
        assert entry == pytest.approx(expected, rel=1e-12, abs=1e-15)
        assert entry["low"] <= entry["high"]


def test_ece_floor_matches_the_exact_binomial_expectation() -> None:
    """Every row is [0.7, 0.3]: one bin, top label 0, so ECE = |k/n - 0.7| with k ~ Binomial(n, 0.7)
    labels 0; its expectation by exact enumeration over k."""
    n = 40
    exact = sum(math.comb(n, k) * 0.7**k * 0.3 ** (n - k) * abs(k / n - 0.7) for k in range(n + 1))
    floor = ece_floor(np.tile([0.7, 0.3], (n, 1)), n_draws=4000, seed=3)
    assert abs(floor.value - exact) < 0.004
    assert floor.low < exact < floor.high
    assert floor == ece_floor(np.tile([0.7, 0.3], (n, 1)), n_draws=4000, seed=3)


def test_ece_floor_is_zero_for_certain_probabilities_and_shrinks_with_rows() -> None:
    assert ece_floor(np.eye(3)[[0, 2, 1, 1]]).high == 0.0
    rng = np.random.default_rng(0)
    probs = _softmax(rng.normal(size=(4000, 5)) * 2)
    assert ece_floor(probs[:4000]).value < 0.5 * ece_floor(probs[:250]).value


def test_metrics_refuse_bad_inputs() -> None:
    with pytest.raises(ValueError, match=r"labels must have shape \(2,\)"):
        ece(np.array([[0.5, 0.5], [0.5, 0.5]]), np.array([0, 1, 1]))
    with pytest.raises(ValueError, match="each row must sum to 1"):
        nll(np.array([[0.2, 0.2], [0.5, 0.5]]), np.array([0, 1]))
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        brier(np.array([[1.5, -0.5]]), np.array([0]))
