"""The anchors every Jev number is read against: a LogisticRegression per field on fixed features.

Two anchors share one recipe for everything after the features (`FieldBaseline`): a
`LogisticRegression` per field trained on the train split, and a calibrated variant that freezes
it and fits scikit-learn's own calibrator on the calibration split: temperature scaling for fields
with more than two values, Platt's sigmoid for binary ones, as Jev's own calibration does.

- TF-IDF, the data sets' anchor: `TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)`
  (character 1-3 grams for a field named `language`, where words say little) and `C=10`.
- MiniLM, the SetFit recipe without its contrastive step: frozen all-MiniLM-L6-v2 sentence
  embeddings (`jev.evaluate.minilm`), with C picked from `C_GRID` by log-loss on the valid split.

Labels are value indices throughout (as `Task.spec.encode_label` gives them), and probabilities
come back with one column per value of the field, so they line up with Jev's head outputs even
when the train split never shows some value.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.base import TransformerMixin
from sklearn.calibration import CalibratedClassifierCV
from sklearn.dummy import DummyClassifier
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline, make_pipeline

from jev.calibration.metrics import nll
from jev.data.examples import Example, read_examples
from jev.decide.kinds import kind_of
from jev.schema import FieldSpec, JevError, Task, render_input

TFIDF_NAME = "TF-IDF + LogisticRegression"
TFIDF_C = 10.0
MINILM_NAME = "all-MiniLM-L6-v2 mean-pooled embeddings + LogisticRegression"
# Four decades around scikit-learn's default C=1.
C_GRID = (0.1, 1.0, 10.0, 100.0)

Rows = Sequence[str] | np.ndarray
"""What a baseline reads: texts, which its pipeline turns into features, or feature vectors `[n, d]`."""


@dataclass(frozen=True)
class LabelledTexts:
    """Rows of a data file as the baseline sees them: the rendered input text and the labels."""

    texts: list[str]
    labels: list[dict[str, int | list[int]]]


@dataclass(frozen=True)
class BaselineProbabilities:
    """One field's test probabilities `[n, n_values]`, raw and (when it could be fitted) calibrated.

    `C` is the regression's inverse regularisation strength the probabilities came from. `note`
    says why `calibrated` is None, e.g. the calibration split lacks a value the model predicts.
    """

    raw: np.ndarray
    calibrated: np.ndarray | None
    method: str
    C: float
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


def _as_rows(rows: Rows) -> list[str] | np.ndarray:
    return rows if isinstance(rows, np.ndarray) else list(rows)


class FieldBaseline:
    """The baseline of one field: a fitted pipeline and the value index of each of its classes.

    `features(field)` gives the pipeline's first step, fitted with the regression on the train
    split (TF-IDF by default); with `features=None` the rows already are feature vectors.
    The pipeline is trained on class positions 0..C-1 rather than value indices, because
    scikit-learn's temperature scaling reads labels as column positions; `classes` maps them back.
    A train split with a single value gets a prior-only model: logistic regression needs two.
    """

    def __init__(
        self,
        field: str,
        n_values: int,
        C: float = TFIDF_C,
        features: Callable[[str], TransformerMixin] | None = vectorizer,
    ) -> None:
        self.field = field
        self.n_values = n_values
        self.C = C
        self.features = features

    def fit(self, rows: Rows, y: Sequence[int]) -> "FieldBaseline":
        labels = np.asarray(y, dtype=np.int64)
        self.classes_ = np.unique(labels)
        positions = np.searchsorted(self.classes_, labels)
        if self.classes_.size < 2:
            self.model_: Pipeline = make_pipeline(DummyClassifier(strategy="prior"))
        else:
            steps = [] if self.features is None else [self.features(self.field)]
            self.model_ = make_pipeline(*steps, LogisticRegression(C=self.C, max_iter=2000))
        self.model_.fit(_as_rows(rows), positions)
        self.calibrated_: CalibratedClassifierCV | None = None
        return self

    def calibrate(self, rows: Rows, y: Sequence[int]) -> str | None:
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
        self.calibrated_.fit(_as_rows(rows), np.searchsorted(self.classes_, labels))
        return None

    def predict_proba(self, rows: Rows, calibrated: bool = False) -> np.ndarray:
        """Probabilities `[n, n_values]`; values the train split never showed get probability 0."""
        model = self.calibrated_ if calibrated else self.model_
        if model is None:
            raise ValueError(f"field {self.field!r}: the baseline has no fitted calibrator")
        out = np.zeros((len(rows), self.n_values))
        out[:, self.classes_] = model.predict_proba(_as_rows(rows))
        return out


def fit_picking_c(
    field: str, n_values: int, train: tuple[np.ndarray, np.ndarray], valid: tuple[np.ndarray, np.ndarray],
    grid: Sequence[float] = C_GRID,
) -> FieldBaseline:
    """Of one baseline on feature vectors per C in `grid`, the one with the lowest log-loss on `valid`.

    `train` and `valid` are (features `[n, d]`, labels `[n]`). Log-loss rather than accuracy: it
    rarely ties on a few hundred rows, and on a tie the earlier (in C_GRID, the smaller) C wins.
    """
    fitted = [FieldBaseline(field, n_values, C=c, features=None).fit(*train) for c in grid]
    losses = [nll(baseline.predict_proba(valid[0]), valid[1]) for baseline in fitted]
    return fitted[int(np.argmin(losses))]


def _label_columns(spec: FieldSpec, labels: Sequence[dict[str, int | list[int]]]) -> dict[str, tuple[int, np.ndarray]]:
    """Per reported field its number of values and label indices; multi-label fields per label, as 0/1."""
    array = np.array([row[spec.name] for row in labels])
    if not kind_of(spec).multilabel:
        return {spec.name: (spec.n_values, array)}
    return {f"{spec.name}[{label}]": (2, array[:, j]) for j, label in enumerate(spec.values)}


FitField = Callable[[str, str, int, np.ndarray], FieldBaseline]
"""`fit(field, name, n_values, train_labels)`: one reported field's baseline, fitted on the caller's train rows."""


def _field_probabilities(
    task: Task, train_labels: Sequence[dict], calib: tuple[Rows, Sequence[dict]], test_rows: Rows, fit: FitField
) -> dict[str, BaselineProbabilities]:
    """Per reported field: fit with `fit`, calibrate on `calib` (rows, labels), and score `test_rows`.

    Multi-label fields are reported one label at a time, as binary fields named `field[label]`.
    """
    result = {}
    for spec in task.spec.closed_fields:
        calib_columns = _label_columns(spec, calib[1])
        for name, (n_values, y) in _label_columns(spec, train_labels).items():
            baseline = fit(spec.name, name, n_values, y)
            note = baseline.calibrate(calib[0], calib_columns[name][1])
            result[name] = BaselineProbabilities(
                raw=baseline.predict_proba(test_rows),
                calibrated=None if note else baseline.predict_proba(test_rows, calibrated=True),
                method=calibration_method(n_values),
                C=baseline.C,
                note=note,
            )
    return result


def baseline_probabilities(
    task: Task, train: LabelledTexts, calib: LabelledTexts, test_texts: Sequence[str]
) -> dict[str, BaselineProbabilities]:
    """The raw and calibrated TF-IDF baseline on `test_texts` for every closed field of `task`."""

    def fit(field: str, _name: str, n_values: int, y: np.ndarray) -> FieldBaseline:
        return FieldBaseline(field, n_values).fit(train.texts, y)

    return _field_probabilities(task, train.labels, (calib.texts, calib.labels), test_texts, fit)


def minilm_probabilities(
    task: Task,
    train: LabelledTexts,
    valid: LabelledTexts,
    calib: LabelledTexts,
    test_texts: Sequence[str],
    embed: Callable[[Sequence[str]], np.ndarray],
) -> dict[str, BaselineProbabilities]:
    """The raw and calibrated MiniLM anchor on `test_texts`, C picked per field on `valid`.

    `embed` turns texts into sentence embeddings `[n, d]` (`MiniLMEncoder.load().encode`); each
    split is embedded once, for all fields.
    """
    if not valid.texts:
        raise JevError("the MiniLM anchor picks C on the valid split, which has no rows")
    x_train, x_valid, x_calib, x_test = (embed(t) for t in (train.texts, valid.texts, calib.texts, test_texts))
    valid_y = {
        name: y for spec in task.spec.closed_fields for name, (_, y) in _label_columns(spec, valid.labels).items()
    }

    def fit(field: str, name: str, n_values: int, y: np.ndarray) -> FieldBaseline:
        return fit_picking_c(field, n_values, (x_train, y), (x_valid, valid_y[name]))

    return _field_probabilities(task, train.labels, (x_calib, calib.labels), x_test, fit)
