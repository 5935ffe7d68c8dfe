"""The classic baseline every Jev number is read against: TF-IDF + LogisticRegression per field.

The recipe is the data sets' anchor: `TfidfVectorizer(ngram_range=(1, 2), min_df=2,
sublinear_tf=True)` (character 1-3 grams for a field named `language`, where words say little)
and `LogisticRegression(C=10)`, trained on the train split. Its calibrated variant freezes that
model and fits scikit-learn's own calibrator on the calibration split: temperature scaling for
fields with more than two values, Platt's sigmoid for binary ones, as Jev's own calibration does.

Labels are value indices throughout (as `Task.spec.encode_label` gives them), and probabilities
come back with one column per value of the field, so they line up with Jev's head outputs even
when the train split never shows some value.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.calibration import CalibratedClassifierCV
from sklearn.dummy import DummyClassifier
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline, make_pipeline

from jev.schema import FieldSpec, Task, render_input
from jev.train.examples import Example, read_examples

NAME = "TF-IDF + LogisticRegression(C=10)"


@dataclass(frozen=True)
class LabelledTexts:
    """Rows of a data file as the baseline sees them: the rendered input text and the labels."""

    texts: list[str]
    labels: list[dict[str, int | list[int]]]


@dataclass(frozen=True)
class BaselineProbabilities:
    """One field's test probabilities `[n, n_values]`, raw and (when it could be fitted) calibrated.

    `note` says why `calibrated` is None, e.g. the calibration split lacks a value the model predicts.
    """

    raw: np.ndarray
    calibrated: np.ndarray | None
    method: str
    note: str | None = None


def read_with_texts(
    path: Path, task: Task, encode: Callable[[Task, dict], list[int]], skip_invalid: bool = False
) -> tuple[list[Example], list[str], list[str]]:
    """`read_examples` plus each kept row's rendered input text, in the same order.

    The text is recorded inside `encode` under the identity of the token-id list it returns, so a
    row that fails after encoding can never shift the texts against the examples.
    """
    texts: dict[int, str] = {}

    def encode_and_keep_text(t: Task, data: dict) -> list[int]:
        ids = list(encode(t, data))
        texts[id(ids)] = render_input(t, data)
        return ids

    examples, problems = read_examples(path, task, encode_and_keep_text, skip_invalid)
    return examples, [texts[id(e.token_ids)] for e in examples], problems


def read_labelled_texts(path: Path, task: Task, skip_invalid: bool = False) -> LabelledTexts:
    """The rendered text and labels of every valid row, validated like Jev's own training rows."""
    examples, texts, _ = read_with_texts(path, task, lambda _t, _d: [], skip_invalid)
    return LabelledTexts(texts, [e.label for e in examples])


def vectorizer(field: str) -> TfidfVectorizer:
    """The anchor recipe's features: word 1-2 grams, or character 1-3 grams for `language`."""
    if field == "language":
        return TfidfVectorizer(analyzer="char", ngram_range=(1, 3), min_df=2, sublinear_tf=True)
    return TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)


def calibration_method(n_values: int) -> str:
    """Platt's sigmoid for binary fields, temperature scaling (one parameter, argmax kept) otherwise."""
    return "sigmoid" if n_values == 2 else "temperature"


class FieldBaseline:
    """The baseline of one field: a fitted pipeline and the value index of each of its classes.

    The pipeline is trained on class positions 0..C-1 rather than value indices, because
    scikit-learn's temperature scaling reads labels as column positions; `classes` maps them back.
    A train split with a single value gets a prior-only model: logistic regression needs two.
    """

    def __init__(self, field: str, n_values: int) -> None:
        self.field = field
        self.n_values = n_values

    def fit(self, texts: Sequence[str], y: Sequence[int]) -> "FieldBaseline":
        labels = np.asarray(y, dtype=np.int64)
        self.classes_ = np.unique(labels)
        positions = np.searchsorted(self.classes_, labels)
        if self.classes_.size < 2:
            self.model_: Pipeline = make_pipeline(DummyClassifier(strategy="prior"))
        else:
            self.model_ = make_pipeline(vectorizer(self.field), LogisticRegression(C=10, max_iter=2000))
        self.model_.fit(list(texts), positions)
        self.calibrated_: CalibratedClassifierCV | None = None
        return self

    def calibrate(self, texts: Sequence[str], y: Sequence[int]) -> str | None:
        """Fit the calibrator on held-out rows; return why not when the rows cannot support it."""
        labels = np.asarray(y, dtype=np.int64)
        seen = np.unique(labels)
        if self.classes_.size < 2:
            return "the train split has a single value, so there is nothing to calibrate"
        if not np.array_equal(seen, self.classes_):
            return (
                f"the calibration split shows values {seen.tolist()} but the model learned "
                f"{self.classes_.tolist()}; scikit-learn calibrates only the same set"
            )
        method = calibration_method(self.n_values)
        self.calibrated_ = CalibratedClassifierCV(FrozenEstimator(self.model_), method=method)
        self.calibrated_.fit(list(texts), np.searchsorted(self.classes_, labels))
        return None

    def predict_proba(self, texts: Sequence[str], calibrated: bool = False) -> np.ndarray:
        """Probabilities `[n, n_values]`; values the train split never showed get probability 0."""
        model = self.calibrated_ if calibrated else self.model_
        if model is None:
            raise ValueError(f"field {self.field!r}: the baseline has no fitted calibrator")
        out = np.zeros((len(texts), self.n_values))
        out[:, self.classes_] = model.predict_proba(list(texts))
        return out


def _label_columns(spec: FieldSpec, labels: Sequence[dict[str, int | list[int]]]) -> dict[str, tuple[int, np.ndarray]]:
    """Per reported field its number of values and label indices; multi-label fields per label, as 0/1."""
    array = np.array([row[spec.name] for row in labels])
    if spec.kind != "multilabel":
        return {spec.name: (spec.n_values, array)}
    return {f"{spec.name}[{label}]": (2, array[:, j]) for j, label in enumerate(spec.values)}


def baseline_probabilities(
    task: Task, train: LabelledTexts, calib: LabelledTexts, test_texts: Sequence[str]
) -> dict[str, BaselineProbabilities]:
    """The raw and calibrated baseline on `test_texts` for every closed field of `task`.

    Multi-label fields are reported one label at a time, as binary fields named `field[label]`.
    """
    result = {}
    for spec in task.spec.closed_fields:
        calib_columns = _label_columns(spec, calib.labels)
        for name, (n_values, y) in _label_columns(spec, train.labels).items():
            baseline = FieldBaseline(spec.name, n_values).fit(train.texts, y)
            note = baseline.calibrate(calib.texts, calib_columns[name][1])
            result[name] = BaselineProbabilities(
                raw=baseline.predict_proba(test_texts),
                calibrated=None if note else baseline.predict_proba(test_texts, calibrated=True),
                method=calibration_method(n_values),
                note=note,
            )
    return result
