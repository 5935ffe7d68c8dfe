"""Post-hoc calibrators: raw head probabilities in, calibrated probabilities out.

Each calibrator follows scikit-learn's contract (parameters in `__init__`, `fit` learns state whose
names end in `_`), so it can be cloned or swapped for one of scikit-learn's own. Each one also
serialises to plain JSON numbers with `to_dict` because a checkpoint must never be pickle: loading
a model may not run code. `from_dict(to_dict())` reproduces predictions bit for bit, since JSON
floats round-trip exactly.

Binary calibrators (Platt, isotonic) take either the positive-class probability `[n]` or a
two-column distribution `[n, 2]` (column 1 is the positive value) and answer in the same shape.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, ClassVar, Self

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression
from sklearn.utils.validation import check_is_fitted

from jev.calibration._validation import check_distribution, check_labels, check_probabilities
from jev.calibration.search import golden_section_minimize

# A head may put exactly 0 on a value; log(0) would make every temperature infinitely wrong.
_PROB_FLOOR = 1e-12
# The temperatures searched (temperature scaling) or allowed (vector scaling) by default.
T_MIN, T_MAX = 0.05, 20.0

METHODS = ("temperature", "vector", "platt", "isotonic")
# Methods that calibrate a whole distribution, so they take fields of any number of values.
DISTRIBUTION_METHODS = ("temperature", "vector")
KINDS = ("categorical", "bool", "int", "multilabel")


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """Logistic function without overflow warnings for large |z|."""
    out = np.empty_like(z)
    pos = z >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
    ez = np.exp(z[~pos])
    out[~pos] = ez / (1.0 + ez)
    return out


def _logit(p: np.ndarray) -> np.ndarray:
    clipped = np.clip(p, _PROB_FLOOR, 1.0 - _PROB_FLOOR)
    return np.log(clipped) - np.log1p(-clipped)


def _positive_column(probs: object, calibrator: str) -> tuple[np.ndarray, bool]:
    """Return the positive-class probabilities and whether the input had two columns."""
    array = check_probabilities(probs, ndim=(1, 2))
    if array.ndim == 1:
        return array, False
    if array.shape[1] != 2:
        raise ValueError(
            f"{calibrator} calibrates one probability per sample: give [n] or [n, 2] probabilities, "
            f"got shape {array.shape}. For a field with more than two values use 'temperature'."
        )
    return check_distribution(array)[:, 1], True


def _in_input_shape(positive: np.ndarray, two_columns: bool) -> np.ndarray:
    return np.column_stack([1.0 - positive, positive]) if two_columns else positive


def _check_method(d: dict[str, Any], expected: str) -> None:
    if d.get("method") != expected:
        raise ValueError(f"expected a dict with method={expected!r}, got method={d.get('method')!r}")


def _field_log_probs(probs: object) -> tuple[np.ndarray, bool]:
    """Log-probabilities `[n, K]` of a distribution, or of `[1 - p, p]` for a 1-D input (and whether it was)."""
    array = check_probabilities(probs, ndim=(1, 2))
    one_dimensional = array.ndim == 1
    dist = np.column_stack([1.0 - array, array]) if one_dimensional else check_distribution(array)
    return np.log(np.maximum(dist, _PROB_FLOOR)), one_dimensional


def _scaled(probs: object, n_classes: int, temperature: float, bias: np.ndarray | float = 0.0) -> np.ndarray:
    """`softmax(log p / temperature + bias)`, in the input's shape, for a calibrator fitted on `n_classes` values."""
    log_probs, one_dimensional = _field_log_probs(probs)
    if log_probs.shape[1] != n_classes:
        raise ValueError(f"fitted on {n_classes} values, got {log_probs.shape[1]}")
    scaled = np.exp(_log_softmax(log_probs / temperature + bias))
    return scaled[:, 1] if one_dimensional else scaled


class TemperatureScaling(BaseEstimator):
    """One temperature T > 0 for a whole field: `softmax(log p / T)`.

    Guo et al. (2017) found miscalibration of modern networks "intrinsically low dimensional": one
    scalar fixes most of it, cannot overfit a small calibration split, and keeps the argmax (so
    accuracy is unchanged). T is fitted by minimising NLL with golden-section search over log T
    in [t_min, t_max]. A 1-D input `[n]` is read as the positive-class probability of a binary
    field, so temperature also works per label of a multi-label field.
    """

    name: ClassVar[str] = "temperature"

    def __init__(self, t_min: float = T_MIN, t_max: float = T_MAX) -> None:
        self.t_min = t_min
        self.t_max = t_max

    def fit(self, probs: object, y: object) -> Self:
        log_probs, _ = _field_log_probs(probs)
        labels = check_labels(y, log_probs.shape[0], log_probs.shape[1])
        if not 0.0 < self.t_min < self.t_max:
            raise ValueError(f"need 0 < t_min < t_max, got t_min={self.t_min}, t_max={self.t_max}")
        log_t = golden_section_minimize(
            lambda u: temperature_nll(log_probs, labels, math.exp(u)),
            math.log(self.t_min),
            math.log(self.t_max),
        )
        self.temperature_ = math.exp(log_t)
        self.n_classes_ = int(log_probs.shape[1])
        self.n_samples_ = int(log_probs.shape[0])
        self.fitted_at_ = _now_iso()
        return self

    def predict_proba(self, probs: object) -> np.ndarray:
        check_is_fitted(self)
        return _scaled(probs, self.n_classes_, self.temperature_)

    def to_dict(self) -> dict[str, Any]:
        check_is_fitted(self)
        return {
            "method": self.name,
            "fitted_at": self.fitted_at_,
            "n_samples": self.n_samples_,
            "t_min": float(self.t_min),
            "t_max": float(self.t_max),
            "n_classes": self.n_classes_,
            "temperature": float(self.temperature_),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        _check_method(d, cls.name)
        calibrator = cls(t_min=float(d["t_min"]), t_max=float(d["t_max"]))
        calibrator.temperature_ = float(d["temperature"])
        calibrator.n_classes_ = int(d["n_classes"])
        calibrator.n_samples_ = int(d["n_samples"])
        calibrator.fitted_at_ = str(d["fitted_at"])
        return calibrator


def temperature_nll(log_probs: np.ndarray, labels: np.ndarray, temperature: float) -> float:
    """Mean negative log-likelihood of `labels` under `softmax(log_probs / temperature)`."""
    scaled = _log_softmax(log_probs / temperature)
    return float(-scaled[np.arange(labels.shape[0]), labels].mean())


# Vector scaling's bias penalties tried by cross-validation; None fixes the biases at zero, which is
# temperature scaling, so the search can always fall back to one parameter.
PENALTIES: tuple[float | None, ...] = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1, None)
CV_FOLDS = 5


class VectorScaling(BaseEstimator):
    """A temperature and one bias per value: `softmax(log p / T + b)`.

    Guo et al.'s (2017) vector scaling, restricted to a shared temperature: the biases fix a head
    that favours some values over others, which one temperature cannot (a multi-valued field like a
    topic, trained on one mix of values). They can change the argmax, so the answer follows the
    calibrated probabilities. `penalty * |b|^2` keeps the biases small; the penalty is the one of
    `penalties` with the lowest `folds`-fold cross-validated NLL on the calibration rows. `None`
    (no biases) is a candidate, so a field whose biases do not pay held out stays
    temperature-scaled. (The most regularised penalty within a standard error of the best kept
    every field of the default model but `topic` at no biases, and the lowest NLL gave a lower test
    NLL on four fields and the same on the fifth: docs/benchmarks.md.) The objective is convex in
    (1/T, b); Newton's method fits it.
    """

    name: ClassVar[str] = "vector"

    def __init__(self, penalties: tuple[float | None, ...] = PENALTIES, folds: int = CV_FOLDS) -> None:
        self.penalties = penalties
        self.folds = folds

    def fit(self, probs: object, y: object) -> Self:
        log_probs, _ = _field_log_probs(probs)
        labels = check_labels(y, log_probs.shape[0], log_probs.shape[1])
        if not self.penalties or any(p is not None and p <= 0 for p in self.penalties):
            raise ValueError(f"penalties must be positive numbers or None, got {self.penalties}")
        if len(self.penalties) == 1:
            self.penalty_ = self.penalties[0]
            self.cv_nll_ = []
        else:
            held_out = [_held_out_losses(log_probs, labels, p, self.folds) for p in self.penalties]
            self.cv_nll_ = [float(losses.mean()) for losses in held_out]
            self.penalty_ = self.penalties[int(np.argmin(self.cv_nll_))]
        inverse_t, self.bias_ = fit_vector_scaling(log_probs, labels, self.penalty_)
        self.temperature_ = 1.0 / inverse_t
        self.n_classes_ = int(log_probs.shape[1])
        self.n_samples_ = int(log_probs.shape[0])
        self.fitted_at_ = _now_iso()
        return self

    def predict_proba(self, probs: object) -> np.ndarray:
        check_is_fitted(self)
        return _scaled(probs, self.n_classes_, self.temperature_, self.bias_)

    def to_dict(self) -> dict[str, Any]:
        check_is_fitted(self)
        return {
            "method": self.name,
            "fitted_at": self.fitted_at_,
            "n_samples": self.n_samples_,
            "penalties": list(self.penalties),
            "folds": int(self.folds),
            "cv_nll": [float(v) for v in self.cv_nll_],
            "penalty": self.penalty_,
            "n_classes": self.n_classes_,
            "temperature": float(self.temperature_),
            "bias": self.bias_.tolist(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        _check_method(d, cls.name)
        calibrator = cls(penalties=tuple(d["penalties"]), folds=int(d["folds"]))
        calibrator.cv_nll_ = [float(v) for v in d["cv_nll"]]
        calibrator.penalty_ = d["penalty"]
        calibrator.temperature_ = float(d["temperature"])
        calibrator.bias_ = np.asarray(d["bias"], dtype=np.float64)
        calibrator.n_classes_ = int(d["n_classes"])
        calibrator.n_samples_ = int(d["n_samples"])
        calibrator.fitted_at_ = str(d["fitted_at"])
        return calibrator


def vector_scaling_objective(
    log_probs: np.ndarray, labels: np.ndarray, inverse_t: float, bias: np.ndarray, penalty: float | None
) -> float:
    """Mean NLL of `softmax(log_probs * inverse_t + bias)` plus `penalty * |bias|^2`."""
    scaled = _log_softmax(log_probs * inverse_t + bias)
    loss = float(-scaled[np.arange(labels.shape[0]), labels].mean())
    return loss + (0.0 if penalty is None else penalty * float(bias @ bias))


def fit_vector_scaling(
    log_probs: np.ndarray, labels: np.ndarray, penalty: float | None, max_iter: int = 100
) -> tuple[float, np.ndarray]:
    """`(1/T, b)` minimising `vector_scaling_objective`; `penalty=None` keeps b at zero.

    Damped Newton: the objective is a multinomial logistic loss, linear in its parameters, so the
    Hessian is `mean(J^T (diag p - p p^T) J)` with `J = [log p | I]`, and a halving line search
    keeps every step a descent. T stays within [T_MIN, T_MAX], so a head whose
    probabilities rank its values backwards gets the flattest temperature and the biases' priors.
    """
    lowest, highest = 1.0 / T_MAX, 1.0 / T_MIN
    n, k = log_probs.shape
    free = 1 if penalty is None else 1 + k
    params = np.zeros(1 + k)
    params[0] = 1.0
    onehot = np.eye(k)[labels]
    ridge = 1e-9 if penalty is None else 2.0 * penalty

    def objective(x: np.ndarray) -> float:
        return vector_scaling_objective(log_probs, labels, x[0], x[1:], penalty)

    current = objective(params)
    for _ in range(max_iter):
        p = np.exp(_log_softmax(log_probs * params[0] + params[1:]))
        residual = p - onehot
        grad = np.concatenate([[np.mean((residual * log_probs).sum(1))], residual.mean(0) + ridge * params[1:]])
        weighted = p * log_probs
        s_logp = weighted - p * weighted.sum(1, keepdims=True)  # (diag p - p p^T) log p, per row
        hessian = np.empty((1 + k, 1 + k))
        hessian[0, 0] = np.mean((log_probs * s_logp).sum(1))
        hessian[0, 1:] = hessian[1:, 0] = s_logp.mean(0)
        hessian[1:, 1:] = np.diag(p.mean(0)) - p.T @ p / n + ridge * np.eye(k)
        step = np.linalg.solve(hessian[:free, :free] + 1e-12 * np.eye(free), grad[:free])
        scale = 1.0
        while scale > 1e-8:
            trial = params.copy()
            trial[:free] -= scale * step
            trial[0] = min(max(trial[0], lowest), highest)
            value = objective(trial)
            if value <= current:
                break
            scale /= 2
        else:
            break
        converged = current - value < 1e-12
        params, current = trial, value
        if converged:
            break
    return float(params[0]), params[1:]


def _held_out_losses(log_probs: np.ndarray, labels: np.ndarray, penalty: float | None, folds: int) -> np.ndarray:
    """Each row's NLL under vector scaling at `penalty` fitted without its fold (a fixed shuffle)."""
    losses = np.empty(labels.shape[0])
    order = np.random.default_rng(0).permutation(labels.shape[0])
    for held in np.array_split(order, folds):
        kept = np.setdiff1d(order, held)
        inverse_t, bias = fit_vector_scaling(log_probs[kept], labels[kept], penalty)
        scaled = _log_softmax(log_probs[held] * inverse_t + bias)
        losses[held] = -scaled[np.arange(held.shape[0]), labels[held]]
    return losses


class PlattScaling(BaseEstimator):
    """Logistic regression on the logit of p: `sigmoid(coef * logit(p) + intercept)`.

    Two parameters instead of one, so it can also fix a bias (a head that is systematically too
    eager to say "true"), which temperature scaling cannot. Binary only. `C` is scikit-learn's
    inverse regularisation; the large default makes it the unregularised fit Platt described.
    """

    name: ClassVar[str] = "platt"

    def __init__(self, C: float = 1e4, max_iter: int = 1000) -> None:
        self.C = C
        self.max_iter = max_iter

    def fit(self, probs: object, y: object) -> Self:
        positive, _ = _positive_column(probs, self.name)
        labels = check_labels(y, positive.shape[0], 2)
        if np.unique(labels).size < 2:
            raise ValueError("platt needs both classes (0 and 1) in the calibration labels")
        model = LogisticRegression(C=self.C, max_iter=self.max_iter)
        model.fit(_logit(positive)[:, None], labels)
        self.coef_ = float(model.coef_[0, 0])
        self.intercept_ = float(model.intercept_[0])
        self.n_samples_ = int(positive.shape[0])
        self.fitted_at_ = _now_iso()
        return self

    def predict_proba(self, probs: object) -> np.ndarray:
        check_is_fitted(self)
        positive, two_columns = _positive_column(probs, self.name)
        calibrated = _sigmoid(self.coef_ * _logit(positive) + self.intercept_)
        return _in_input_shape(calibrated, two_columns)

    def to_dict(self) -> dict[str, Any]:
        check_is_fitted(self)
        return {
            "method": self.name,
            "fitted_at": self.fitted_at_,
            "n_samples": self.n_samples_,
            "C": float(self.C),
            "max_iter": int(self.max_iter),
            "coef": self.coef_,
            "intercept": self.intercept_,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        _check_method(d, cls.name)
        calibrator = cls(C=float(d["C"]), max_iter=int(d["max_iter"]))
        calibrator.coef_ = float(d["coef"])
        calibrator.intercept_ = float(d["intercept"])
        calibrator.n_samples_ = int(d["n_samples"])
        calibrator.fitted_at_ = str(d["fitted_at"])
        return calibrator


class IsotonicCalibration(BaseEstimator):
    """A monotone step-then-linear map fitted by scikit-learn's `IsotonicRegression`.

    It assumes only that a higher raw probability never means a lower true one, so it can fix
    shapes a sigmoid cannot; the price is overfitting below roughly a thousand calibration
    samples. The fitted knots are kept and re-applied with `np.interp`, which clips outside the
    knots exactly like `out_of_bounds="clip"`. Binary only.
    """

    name: ClassVar[str] = "isotonic"

    def fit(self, probs: object, y: object) -> Self:
        positive, _ = _positive_column(probs, self.name)
        labels = check_labels(y, positive.shape[0], 2)
        model = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip")
        model.fit(positive, labels.astype(np.float64))
        self.X_thresholds_ = np.asarray(model.X_thresholds_, dtype=np.float64)
        self.y_thresholds_ = np.asarray(model.y_thresholds_, dtype=np.float64)
        self.n_samples_ = int(positive.shape[0])
        self.fitted_at_ = _now_iso()
        return self

    def predict_proba(self, probs: object) -> np.ndarray:
        check_is_fitted(self)
        positive, two_columns = _positive_column(probs, self.name)
        calibrated = np.interp(positive, self.X_thresholds_, self.y_thresholds_)
        return _in_input_shape(calibrated, two_columns)

    def to_dict(self) -> dict[str, Any]:
        check_is_fitted(self)
        return {
            "method": self.name,
            "fitted_at": self.fitted_at_,
            "n_samples": self.n_samples_,
            "x_thresholds": self.X_thresholds_.tolist(),
            "y_thresholds": self.y_thresholds_.tolist(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        _check_method(d, cls.name)
        calibrator = cls()
        calibrator.X_thresholds_ = np.asarray(d["x_thresholds"], dtype=np.float64)
        calibrator.y_thresholds_ = np.asarray(d["y_thresholds"], dtype=np.float64)
        calibrator.n_samples_ = int(d["n_samples"])
        calibrator.fitted_at_ = str(d["fitted_at"])
        return calibrator


_BINARY_CALIBRATORS: dict[str, type[TemperatureScaling | VectorScaling | PlattScaling | IsotonicCalibration]] = {
    "temperature": TemperatureScaling,
    "vector": VectorScaling,
    "platt": PlattScaling,
    "isotonic": IsotonicCalibration,
}


class MultiLabelCalibrator(BaseEstimator):
    """One binary calibrator per label of a multi-label field.

    A multi-label head gives independent probabilities `[n, L]` (rows need not sum to one), so
    each label is its own binary problem with its own miscalibration.
    """

    name: ClassVar[str] = "multilabel"

    def __init__(self, method: str = "platt") -> None:
        self.method = method

    def fit(self, probs: object, y: object) -> Self:
        array = check_probabilities(probs, ndim=(2,))
        labels = np.asarray(y)
        if labels.shape != array.shape:
            raise ValueError(f"multi-label targets must have shape {array.shape}, got {labels.shape}")
        if self.method not in _BINARY_CALIBRATORS:
            raise ValueError(f"unknown per-label method {self.method!r}; use one of {METHODS}")
        factory = _BINARY_CALIBRATORS[self.method]
        self.calibrators_ = [factory().fit(array[:, j], labels[:, j]) for j in range(array.shape[1])]
        self.n_samples_ = int(array.shape[0])
        self.fitted_at_ = _now_iso()
        return self

    def predict_proba(self, probs: object) -> np.ndarray:
        check_is_fitted(self)
        array = check_probabilities(probs, ndim=(2,))
        if array.shape[1] != len(self.calibrators_):
            raise ValueError(f"fitted on {len(self.calibrators_)} labels, got {array.shape[1]}")
        return np.column_stack([c.predict_proba(array[:, j]) for j, c in enumerate(self.calibrators_)])

    def to_dict(self) -> dict[str, Any]:
        check_is_fitted(self)
        return {
            "method": self.name,
            "fitted_at": self.fitted_at_,
            "n_samples": self.n_samples_,
            "label_method": self.method,
            "labels": [c.to_dict() for c in self.calibrators_],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        _check_method(d, cls.name)
        calibrator = cls(method=str(d["label_method"]))
        factory = _BINARY_CALIBRATORS[calibrator.method]
        calibrator.calibrators_ = [factory.from_dict(label) for label in d["labels"]]
        calibrator.n_samples_ = int(d["n_samples"])
        calibrator.fitted_at_ = str(d["fitted_at"])
        return calibrator


Calibrator = TemperatureScaling | VectorScaling | PlattScaling | IsotonicCalibration | MultiLabelCalibrator


def make_calibrator(method: str, kind: str, n_values: int | None = None) -> Calibrator:
    """Build an unfitted calibrator for a field of `kind`, refusing combinations that do not fit.

    `n_values` is the number of values of a categorical / int field: Platt and isotonic calibrate
    one probability, so they are accepted there only when the field has exactly two values.
    Temperature and vector scaling calibrate a whole distribution, so they take any field.
    """
    if method not in METHODS:
        raise ValueError(f"unknown calibration method {method!r}; use one of {METHODS}")
    if kind not in KINDS:
        raise ValueError(f"unknown field kind {kind!r}; use one of {KINDS}")
    if kind == "multilabel":
        return MultiLabelCalibrator(method=method)
    if kind in ("categorical", "int") and method not in DISTRIBUTION_METHODS and n_values != 2:
        values = "an unknown number of" if n_values is None else str(n_values)
        raise ValueError(
            f"{method!r} calibrates one probability, but this {kind} field has {values} values; "
            f"use 'temperature' or 'vector' (or pass n_values=2 for a two-valued field)"
        )
    return _BINARY_CALIBRATORS[method]()


_BY_NAME: dict[str, type[Calibrator]] = {**_BINARY_CALIBRATORS, "multilabel": MultiLabelCalibrator}


def calibrator_from_dict(d: dict[str, Any]) -> Calibrator:
    """Rebuild any calibrator from its `to_dict` output, dispatching on the "method" key."""
    method = d.get("method")
    if method not in _BY_NAME:
        raise ValueError(f"unknown calibrator method {method!r}; expected one of {tuple(_BY_NAME)}")
    return _BY_NAME[method].from_dict(d)
