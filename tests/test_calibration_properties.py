"""Calibration properties the issue names: closed-form ECE, argmax kept, NLL repaired on a planted distortion."""

import numpy as np
import pytest

from jev.calibration import IsotonicCalibration, PlattScaling, TemperatureScaling, ece, nll

RNG = np.random.default_rng(0)


def test_ece_of_a_known_overconfidence_matches_its_closed_form():
    """Binary predictions with top probability c ~ U(0.5, 1) that are right with probability c - 0.1:
    every bin's gap is 0.1, so ECE = 0.1 whatever the binning."""
    n = 200_000
    confidence = RNG.uniform(0.5, 1.0, n)
    predicted = RNG.integers(0, 2, n)
    correct = RNG.random(n) < confidence - 0.1
    y = np.where(correct, predicted, 1 - predicted)
    probs = np.where(predicted[:, None] == np.arange(2), confidence[:, None], 1 - confidence[:, None])
    assert ece(probs, y) == pytest.approx(0.1, abs=0.005)


def test_temperature_scaling_never_changes_the_argmax():
    logits = RNG.normal(size=(5000, 7)) * 3
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    y = RNG.integers(0, 7, 5000)
    calibrated = TemperatureScaling().fit(probs, y).predict_proba(probs)
    assert np.array_equal(calibrated.argmax(1), probs.argmax(1))


@pytest.mark.parametrize("calibrator", [PlattScaling, IsotonicCalibration])
def test_platt_and_isotonic_repair_a_planted_sigmoid_distortion(calibrator):
    """True P(y=1) = sigmoid(z); the model reports sigmoid(3z + 1). Fitted on one half, the other
    half's NLL must drop most of the way to the true probabilities' NLL."""
    z = RNG.normal(size=40_000)
    y = (RNG.random(40_000) < 1 / (1 + np.exp(-z))).astype(int)
    reported = 1 / (1 + np.exp(-(3 * z + 1)))
    two_columns = np.stack([1 - reported, reported], axis=1)
    truth = np.stack([1 / (1 + np.exp(z)), 1 / (1 + np.exp(-z))], axis=1)
    fit, held = slice(0, 20_000), slice(20_000, None)
    repaired = calibrator().fit(two_columns[fit], y[fit]).predict_proba(two_columns[held])
    raw_nll, repaired_nll, best_nll = nll(two_columns[held], y[held]), nll(repaired, y[held]), nll(truth[held], y[held])
    assert repaired_nll < raw_nll
    assert repaired_nll - best_nll < 0.1 * (raw_nll - best_nll)
