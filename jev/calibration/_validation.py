"""Input checks shared by calibrators, metrics and policies.

Every public function in `jev.calibration` takes probabilities straight from a decision head (or
from a user's JSON), so a wrong shape or a label out of range must fail here with a message that
says what was expected, not deep inside numpy or scikit-learn.
"""

from __future__ import annotations

import numpy as np

# float32 heads sum to one only up to rounding; anything further off is not a distribution.
SUM_TOLERANCE = 1e-3


def check_probabilities(probs: object, *, ndim: tuple[int, ...] = (2,)) -> np.ndarray:
    """Return `probs` as float64, refusing non-finite values, values outside [0, 1] or a wrong ndim."""
    array = np.asarray(probs, dtype=np.float64)
    if array.ndim not in ndim:
        raise ValueError(f"probabilities must have ndim in {ndim}, got shape {array.shape}")
    if array.shape[0] == 0:
        raise ValueError("probabilities are empty: need at least one sample")
    if not np.all(np.isfinite(array)):
        raise ValueError("probabilities contain NaN or infinity")
    if array.min() < 0.0 or array.max() > 1.0:
        raise ValueError(f"probabilities must lie in [0, 1], got range [{array.min():.6g}, {array.max():.6g}]")
    return array


def check_distribution(probs: object) -> np.ndarray:
    """Return [n, K] float64 rows that each sum to one within `SUM_TOLERANCE`, K >= 2.

    Rows are returned as given, not renormalised: a policy compares them with a threshold, and
    dividing by a sum of 0.9999999 would move a probability across it.
    """
    array = check_probabilities(probs, ndim=(2,))
    if array.shape[1] < 2:
        raise ValueError(f"a distribution over values needs K >= 2 columns, got shape {array.shape}")
    sums = array.sum(axis=1)
    worst = float(np.max(np.abs(sums - 1.0)))
    if worst > SUM_TOLERANCE:
        raise ValueError(
            f"each row must sum to 1 (a distribution over the field's values); worst row is off by "
            f"{worst:.3g}. For independent multi-label probabilities use MultiLabelCalibrator."
        )
    return array


def check_labels(y: object, n_samples: int, n_classes: int) -> np.ndarray:
    """Return labels as int64 indices in [0, n_classes), one per sample."""
    labels = np.asarray(y)
    if labels.shape != (n_samples,):
        raise ValueError(f"labels must have shape ({n_samples},), got {labels.shape}")
    if labels.dtype.kind == "b":
        labels = labels.astype(np.int64)
    if labels.dtype.kind not in "iu":
        if labels.dtype.kind != "f" or not np.all(labels == np.round(labels)):
            raise ValueError(f"labels must be integer value indices, got dtype {labels.dtype}")
        labels = labels.astype(np.int64)
    if labels.min() < 0 or labels.max() >= n_classes:
        raise ValueError(
            f"labels must be value indices in [0, {n_classes}), got range [{labels.min()}, {labels.max()}]"
        )
    return labels.astype(np.int64)
