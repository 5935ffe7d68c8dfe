"""Calibrators: the fit is right (checked against grid search and scikit-learn), serialisation is
exact, and refusals say what would be accepted."""

from __future__ import annotations

import json
import math
from datetime import datetime

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

from jev.calibration import (
    IsotonicCalibration,
    MultiLabelCalibrator,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
    calibrator_from_dict,
    make_calibrator,
    nll,
)
from jev.calibration.calibrators import fit_vector_scaling, temperature_nll, vector_scaling_objective
from jev.calibration.search import golden_section_minimize


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _sample(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One label per row drawn from that row's distribution (inverse CDF)."""
    u = rng.random(probs.shape[0])[:, None]
    return np.minimum((probs.cumsum(axis=1) < u).sum(axis=1), probs.shape[1] - 1)


def _tempered_data(t_true: float, n: int = 20_000, k: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The model says softmax(z); the world draws labels from softmax(z / t_true)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 3.0, size=(n, k))
    return _softmax(logits), _sample(_softmax(logits / t_true), rng)


def _binary_data(n: int = 5000, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """A head that is biased towards 1 and over-confident: truth is sigmoid(0.6 * logit - 1)."""
    rng = np.random.default_rng(seed)
    logit = rng.normal(0.5, 2.5, size=n)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(0.6 * logit - 1.0)))).astype(np.int64)
    return 1.0 / (1.0 + np.exp(-logit)), y


def test_golden_section_finds_the_minimum_of_a_parabola_and_a_bound() -> None:
    assert golden_section_minimize(lambda x: (x - 1.234) ** 2, -5.0, 5.0) == pytest.approx(1.234, abs=1e-8)
    assert golden_section_minimize(lambda x: x, 2.0, 3.0) == 2.0


def test_temperature_fit_matches_grid_search() -> None:
    probs, y = _tempered_data(1.7, n=2000, seed=3)
    log_probs = np.log(probs)
    fitted = TemperatureScaling().fit(probs, y).temperature_
    grid = np.exp(np.linspace(math.log(0.05), math.log(20.0), 601))
    losses = [temperature_nll(log_probs, y, t) for t in grid]
    best = grid[int(np.argmin(losses))]
    step = grid[1] / grid[0]
    assert best / step <= fitted <= best * step
    assert temperature_nll(log_probs, y, fitted) <= min(losses) + 1e-12


@pytest.mark.parametrize("t_true", [0.5, 2.0])
def test_temperature_recovers_known_temperature_and_lowers_nll(t_true: float) -> None:
    probs, y = _tempered_data(t_true)
    calibrator = TemperatureScaling().fit(probs, y)
    assert calibrator.temperature_ == pytest.approx(t_true, rel=0.05)
    calibrated = calibrator.predict_proba(probs)
    assert nll(calibrated, y) < nll(probs, y) - 0.01
    np.testing.assert_array_equal(calibrated.argmax(axis=1), probs.argmax(axis=1))
    np.testing.assert_allclose(calibrated.sum(axis=1), 1.0)


def test_temperature_on_binary_accepts_two_columns_or_one() -> None:
    p, y = _binary_data()
    two = TemperatureScaling().fit(np.column_stack([1 - p, p]), y)
    one = TemperatureScaling().fit(p, y)
    assert two.temperature_ == pytest.approx(one.temperature_, rel=1e-9)
    assert two.temperature_ > 1.2  # the data is over-confident
    np.testing.assert_allclose(one.predict_proba(p), two.predict_proba(np.column_stack([1 - p, p]))[:, 1])


@pytest.mark.parametrize("shape", ["one_column", "two_columns"])
def test_platt_equals_scikit_learn_logistic_regression_on_the_logit(shape: str) -> None:
    p, y = _binary_data()
    probs = p if shape == "one_column" else np.column_stack([1 - p, p])
    calibrator = PlattScaling().fit(probs, y)
    reference = LogisticRegression(C=1e4, max_iter=1000).fit(np.log(p / (1 - p))[:, None], y)
    test_p = np.linspace(0.001, 0.999, 301)
    expected = reference.predict_proba(np.log(test_p / (1 - test_p))[:, None])[:, 1]
    got = calibrator.predict_proba(test_p if shape == "one_column" else np.column_stack([1 - test_p, test_p]))
    np.testing.assert_allclose(got if shape == "one_column" else got[:, 1], expected, rtol=0, atol=1e-12)
    assert calibrator.coef_ == pytest.approx(0.6, abs=0.08)
    assert calibrator.intercept_ == pytest.approx(-1.0, abs=0.15)


def test_isotonic_equals_scikit_learn_predict_inside_and_outside_the_knots() -> None:
    p, y = _binary_data(n=3000)
    # Knots only inside [0.1, 0.91], and end pairs that violate monotonicity so PAVA pools them: the
    # end values are then strictly inside (0, 1), where clipping beyond the knots is visible.
    inside = (p > 0.2) & (p < 0.8)
    fit_p = np.concatenate([[0.1, 0.11], p[inside], [0.9, 0.91]])
    fit_y = np.concatenate([[1, 0], y[inside], [1, 0]])
    calibrator = IsotonicCalibration().fit(fit_p, fit_y)
    reference = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(fit_p, fit_y)
    test_p = np.concatenate([p[:300], [0.0, 1.0]])
    np.testing.assert_allclose(calibrator.predict_proba(test_p), reference.predict(test_p), rtol=0, atol=1e-15)
    assert 0.0 < calibrator.predict_proba(np.array([0.0]))[0] < calibrator.predict_proba(np.array([1.0]))[0] < 1.0
    assert np.all(np.diff(calibrator.predict_proba(np.sort(test_p))) >= 0)


def test_multilabel_applies_one_binary_calibrator_per_label() -> None:
    p0, y0 = _binary_data(seed=4)
    p1, y1 = _binary_data(seed=5)
    probs, y = np.column_stack([p0, 1 - p1]), np.column_stack([y0, 1 - y1])
    calibrator = MultiLabelCalibrator(method="platt").fit(probs, y)
    out = calibrator.predict_proba(probs)
    assert out.shape == probs.shape
    np.testing.assert_allclose(out[:, 1], PlattScaling().fit(1 - p1, 1 - y1).predict_proba(1 - p1))


def _fitted_calibrators() -> list:
    probs, y = _tempered_data(1.5, n=2000)
    p, yb = _binary_data(n=2000)
    return [
        TemperatureScaling().fit(probs, y),
        TemperatureScaling().fit(p, yb),
        PlattScaling().fit(p, yb),
        IsotonicCalibration().fit(p, yb),
        MultiLabelCalibrator(method="isotonic").fit(np.column_stack([p, p**2]), np.column_stack([yb, yb])),
        MultiLabelCalibrator(method="temperature").fit(np.column_stack([p, p**2]), np.column_stack([yb, yb])),
        VectorScaling().fit(probs, y),
        VectorScaling(penalties=(1e-2,)).fit(probs, y),
    ]


@pytest.mark.parametrize("index", range(8))
def test_round_trip_through_json_reproduces_predictions_exactly(index: int) -> None:
    calibrator = _fitted_calibrators()[index]
    d = json.loads(json.dumps(calibrator.to_dict()))
    assert d["method"] == calibrator.name
    assert d["n_samples"] == 2000
    datetime.fromisoformat(d["fitted_at"])
    rebuilt = calibrator_from_dict(d)
    assert type(rebuilt) is type(calibrator)
    probs = _tempered_data(1.5, n=500, seed=9)[0] if index in (0, 6, 7) else _binary_data(n=500, seed=9)[0]
    if isinstance(calibrator, MultiLabelCalibrator):
        probs = np.column_stack([probs, probs**2])
    np.testing.assert_array_equal(rebuilt.predict_proba(probs), calibrator.predict_proba(probs))
    assert rebuilt.to_dict() == d


def test_calibrators_follow_the_scikit_learn_contract() -> None:
    calibrator = PlattScaling(C=3.0)
    with pytest.raises(NotFittedError):
        calibrator.predict_proba(np.array([0.5]))
    assert clone(calibrator).get_params() == {"C": 3.0, "max_iter": 1000}
    assert not hasattr(clone(PlattScaling().fit(*_binary_data())), "coef_")


@pytest.mark.parametrize(
    ("method", "kind", "n_values", "expected"),
    [
        ("temperature", "categorical", 7, TemperatureScaling),
        ("vector", "categorical", 7, VectorScaling),
        ("vector", "bool", None, VectorScaling),
        ("temperature", "int", None, TemperatureScaling),
        ("platt", "bool", None, PlattScaling),
        ("isotonic", "bool", None, IsotonicCalibration),
        ("temperature", "bool", None, TemperatureScaling),
        ("platt", "categorical", 2, PlattScaling),
        ("isotonic", "multilabel", None, MultiLabelCalibrator),
    ],
)
def test_make_calibrator_builds_the_right_type(method: str, kind: str, n_values: int | None, expected: type) -> None:
    calibrator = make_calibrator(method, kind, n_values)
    assert type(calibrator) is expected
    if expected is MultiLabelCalibrator:
        assert calibrator.method == method


@pytest.mark.parametrize(
    ("method", "kind", "n_values", "message"),
    [
        ("isotonic", "categorical", 5, "'isotonic' calibrates one probability, but this categorical field has 5"),
        ("platt", "categorical", None, "use 'temperature' or 'vector'"),
        ("platt", "int", 11, "int field has 11 values"),
        ("beta", "bool", None, "unknown calibration method 'beta'; use one of"),
        ("platt", "text", None, "unknown field kind 'text'; use one of"),
    ],
)
def test_make_calibrator_refuses_with_a_message(method: str, kind: str, n_values: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_calibrator(method, kind, n_values)


def _biased_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The head says softmax(z); the world draws from softmax(z / 1.5 + b) with b favouring value 0."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 2.0, size=(n, 5))
    bias = np.array([1.2, 0.0, -0.4, 0.3, -1.1])
    return _softmax(logits), _sample(_softmax(logits / 1.5 + bias), rng), bias


def test_vector_scaling_recovers_a_known_temperature_and_biases() -> None:
    probs, y, bias = _biased_data(20_000, seed=3)
    calibrator = VectorScaling(penalties=(1e-6,)).fit(probs, y)
    assert calibrator.temperature_ == pytest.approx(1.5, rel=0.05)
    # Biases are defined up to a shared constant (softmax ignores it): compare centred.
    np.testing.assert_allclose(calibrator.bias_ - calibrator.bias_.mean(), bias - bias.mean(), atol=0.08)


@pytest.mark.parametrize("penalty", [1e-3, 1e-1])
def test_vector_scaling_fit_is_the_minimum_scipy_finds(penalty: float) -> None:
    from scipy.optimize import minimize

    probs, y, _ = _biased_data(3000, seed=4)
    log_probs = np.log(probs)
    inverse_t, bias = fit_vector_scaling(log_probs, y, penalty)
    mine = vector_scaling_objective(log_probs, y, inverse_t, bias, penalty)
    scipy = minimize(lambda x: vector_scaling_objective(log_probs, y, x[0], x[1:], penalty),
                     np.r_[1.0, np.zeros(5)], method="Nelder-Mead",
                     options={"maxiter": 20_000, "xatol": 1e-8, "fatol": 1e-12}).fun
    assert mine <= scipy + 1e-9


def test_vector_scaling_without_biases_is_temperature_scaling() -> None:
    probs, y = _tempered_data(1.7, n=3000, seed=5)
    vector = VectorScaling(penalties=(None,)).fit(probs, y)
    temperature = TemperatureScaling().fit(probs, y)
    assert np.all(vector.bias_ == 0.0)
    assert vector.temperature_ == pytest.approx(temperature.temperature_, rel=1e-6)
    np.testing.assert_allclose(vector.predict_proba(probs), temperature.predict_proba(probs), atol=1e-7)


def test_vector_scaling_biases_pay_held_out_and_cost_little_where_there_are_none() -> None:
    biased, y_biased, _ = _biased_data(3000, seed=6)
    assert VectorScaling().fit(biased, y_biased).penalty_ is not None
    held_out, y_held, _ = _biased_data(3000, seed=7)
    vector = VectorScaling().fit(biased, y_biased).predict_proba(held_out)
    temperature = TemperatureScaling().fit(biased, y_biased).predict_proba(held_out)
    assert nll(vector, y_held) < nll(temperature, y_held) - 0.02
    # No bias in the world: whatever penalty cross-validation picks keeps the biases near zero.
    tempered, y_tempered = _tempered_data(1.5, n=3000, seed=8)
    fitted = VectorScaling().fit(tempered, y_tempered)
    assert fitted.penalty_ == fitted.penalties[int(np.argmin(fitted.cv_nll_))]
    assert np.abs(fitted.bias_).max() < 0.1
    held_out, y_held = _tempered_data(1.5, n=20_000, seed=108)
    temperature = TemperatureScaling().fit(tempered, y_tempered).predict_proba(held_out)
    assert nll(fitted.predict_proba(held_out), y_held) < nll(temperature, y_held) + 1e-3


def test_vector_scaling_flattens_backwards_probabilities_to_the_prior() -> None:
    p, y = _binary_data(seed=10)
    calibrator = VectorScaling(penalties=(1e-3,)).fit(1.0 - p, y)
    assert calibrator.temperature_ == pytest.approx(TemperatureScaling().t_max)
    assert calibrator.predict_proba(1.0 - p).mean() == pytest.approx(y.mean(), abs=0.02)


def test_binary_calibrators_refuse_more_than_two_columns() -> None:
    probs, y = _tempered_data(1.0, n=100)
    with pytest.raises(ValueError, match=r"give \[n\] or \[n, 2\].*use 'temperature'"):
        IsotonicCalibration().fit(probs, y)


def test_bad_inputs_are_refused_with_a_message() -> None:
    with pytest.raises(ValueError, match="each row must sum to 1"):
        TemperatureScaling().fit(np.array([[0.5, 0.6], [0.5, 0.5]]), np.array([0, 1]))
    with pytest.raises(ValueError, match=r"labels must be value indices in \[0, 2\)"):
        TemperatureScaling().fit(np.array([[0.5, 0.5], [0.5, 0.5]]), np.array([0, 2]))
    with pytest.raises(ValueError, match="platt needs both classes"):
        PlattScaling().fit(np.array([0.2, 0.7]), np.array([1, 1]))
    with pytest.raises(ValueError, match="unknown calibrator method 'histogram'"):
        calibrator_from_dict({"method": "histogram"})
    with pytest.raises(ValueError, match="fitted on 5 values, got 3"):
        TemperatureScaling().fit(*_tempered_data(1.0, n=50)).predict_proba(np.full((2, 3), 1 / 3))
