"""Policies: abstention exactly at the threshold, conformal coverage on data with a known
distribution, and the precision threshold against brute force."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from jev.calibration import (
    AbstainPolicy,
    Abstention,
    Answer,
    ConformalPolicy,
    PredictionSet,
    threshold_for_precision,
)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _calibrated(n: int, k: int, seed: int, distinct_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities that are exactly the distribution the labels are drawn from.

    With `distinct_rows`, rows repeat, so top confidences tie.
    """
    rng = np.random.default_rng(seed)
    probs = _softmax(rng.normal(0.0, 2.0, size=(distinct_rows or n, k)))[np.arange(n) % (distinct_rows or n)]
    u = rng.random(n)[:, None]
    return probs, np.minimum((probs.cumsum(axis=1) < u).sum(axis=1), k - 1)


def test_abstain_policy_abstains_exactly_below_the_threshold() -> None:
    t = 0.7
    below = np.nextafter(t, 0.0)
    probs = np.array([[t, 1 - t, 0.0], [below, 1 - below, 0.0], [0.1, 0.1, 0.8], [0.2, 0.5, 0.3]])
    policy = AbstainPolicy(t)
    decisions = policy.decide(probs)
    assert decisions == [
        Answer(0, t),
        Abstention(0, float(below), t),
        Answer(2, 0.8),
        Abstention(1, 0.5, t),
    ]
    np.testing.assert_array_equal(policy.answered(probs), [True, False, True, False])


def test_abstain_policy_round_trips_and_refuses_a_bad_threshold() -> None:
    policy = AbstainPolicy(0.83)
    assert AbstainPolicy.from_dict(json.loads(json.dumps(policy.to_dict()))).threshold == 0.83
    with pytest.raises(ValueError, match=r"threshold must lie in \[0, 1\], got 1.5"):
        AbstainPolicy(1.5)
    with pytest.raises(ValueError, match="expected policy='abstain'"):
        AbstainPolicy.from_dict({"policy": "conformal", "threshold": 0.5})


def _qhat_slow(scores: list[float], coverage: float) -> float:
    n = len(scores)
    rank = math.ceil((n + 1) * coverage)
    return 1.0 if rank > n else sorted(scores)[rank - 1]


@pytest.mark.parametrize("coverage", [0.8, 0.9, 0.95])
def test_conformal_sets_reach_the_promised_coverage(coverage: float) -> None:
    probs, y = _calibrated(20_000, 10, seed=0)
    test_probs, test_y = _calibrated(20_000, 10, seed=1)
    policy = ConformalPolicy(coverage).fit(probs, y)
    assert policy.qhat_ == _qhat_slow([1.0 - probs[i, y[i]] for i in range(len(y))], coverage)
    sets = policy.predict_sets(test_probs)
    empirical = sets[np.arange(len(test_y)), test_y].mean()
    assert coverage - 0.01 <= empirical <= coverage + 0.015
    assert sets.sum(axis=1).mean() < 10  # not trivially every value


def test_conformal_set_is_every_value_with_p_at_least_one_minus_qhat() -> None:
    probs, y = _calibrated(500, 4, seed=2)
    policy = ConformalPolicy(0.9).fit(probs, y)
    results = policy.predict(probs[:50])
    for row, result in zip(probs[:50].tolist(), results, strict=True):
        expected = tuple(k for k, p in enumerate(row) if 1.0 - p <= policy.qhat_)
        assert result == PredictionSet(expected, 0.9)


def test_conformal_with_too_few_samples_keeps_every_value() -> None:
    probs, y = _calibrated(8, 3, seed=3)  # ceil(9 * 0.95) = 9 > 8
    policy = ConformalPolicy(0.95).fit(probs, y)
    assert policy.qhat_ == 1.0
    assert policy.predict_sets(probs).all()


def test_conformal_round_trips_and_refuses() -> None:
    probs, y = _calibrated(300, 5, seed=4)
    policy = ConformalPolicy(0.85).fit(probs, y)
    rebuilt = ConformalPolicy.from_dict(json.loads(json.dumps(policy.to_dict())))
    assert rebuilt.qhat_ == policy.qhat_ and rebuilt.n_samples_ == 300
    np.testing.assert_array_equal(rebuilt.predict_sets(probs), policy.predict_sets(probs))
    with pytest.raises(RuntimeError, match="not fitted"):
        ConformalPolicy(0.9).predict(probs)
    with pytest.raises(ValueError, match=r"coverage must lie in \(0, 1\), got 1.0"):
        ConformalPolicy(1.0)


def _threshold_brute_force(probs: np.ndarray, y: np.ndarray, target: float) -> tuple[float, float] | None:
    conf = [max(row) for row in probs.tolist()]
    hit = [int(np.argmax(row)) == label for row, label in zip(probs, y.tolist(), strict=True)]
    for t in sorted(set(conf)):
        answered = [i for i in range(len(conf)) if conf[i] >= t]
        if sum(hit[i] for i in answered) / len(answered) >= target:
            return t, len(answered) / len(conf)
    return None


@pytest.mark.parametrize(
    ("seed", "target", "prototypes"), [(5, 0.8, None), (6, 0.9, None), (7, 0.95, 30), (8, 0.8, 6), (10, 0.85, 30)]
)
def test_threshold_for_precision_matches_brute_force(seed: int, target: float, prototypes: int | None) -> None:
    # With ties, a threshold answers every tied sample together.
    probs, y = _calibrated(400, 4, seed=seed, distinct_rows=prototypes)
    expected = _threshold_brute_force(probs, y, target)
    assert expected is not None
    threshold, coverage = threshold_for_precision(probs, y, target)
    assert (threshold, coverage) == pytest.approx(expected, abs=0.0)
    policy = AbstainPolicy(threshold)
    answered = policy.answered(probs)
    assert answered.mean() == coverage
    assert (probs[answered].argmax(axis=1) == y[answered]).mean() >= target


def test_threshold_for_precision_refuses_an_unreachable_target() -> None:
    probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4]])
    y = np.array([1, 0, 0])
    with pytest.raises(ValueError, match=r"no threshold reaches precision 1.0 on 3 .* best is 0.6667 at threshold 0.6"):
        threshold_for_precision(probs, y, 1.0)
