"""The TF-IDF baseline: one column per field value, calibrated on held-out rows, multi-label per label."""

from typing import Literal

import numpy as np
import pytest
from pydantic import BaseModel

from jev.evaluate.baseline import FieldBaseline, LabelledTexts, baseline_probabilities
from jev.evaluate.report import field_views
from jev.schema import Task


class Text(BaseModel):
    text: str


class Tagged(BaseModel):
    urgency: Literal["low", "mid", "high"]
    tags: set[Literal["refund", "bug", "login"]]


TAGGED = Task(name="tagged", input_model=Text, decision_model=Tagged)
WORDS = {0: "refund money back please", 1: "crash error bug report", 2: "cannot login password reset"}


def _rows(n: int, seed: int) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, size=n)
    return [f"{WORDS[int(k)]} {rng.integers(100)}" for k in y], y


def test_field_baseline_gives_a_column_per_value_even_for_unseen_values() -> None:
    texts, y = _rows(60, seed=0)
    y = np.where(y == 1, 2, y)  # value 1 never appears: its column must exist and hold 0
    baseline = FieldBaseline("topic", n_values=4).fit(texts, y)
    held_texts, held_y = _rows(30, seed=1)
    assert baseline.calibrate(held_texts, np.where(held_y == 1, 2, held_y)) is None
    for calibrated in (False, True):
        probs = baseline.predict_proba(held_texts, calibrated=calibrated)
        assert probs.shape == (30, 4) and np.allclose(probs.sum(axis=1), 1.0)
        assert np.all(probs[:, [1, 3]] == 0.0)
        assert np.mean(probs.argmax(axis=1) == np.where(held_y == 1, 2, held_y)) > 0.9
    assert "the calibration split shows values [0]" in baseline.calibrate(held_texts[:3], [0, 0, 0])


def test_multilabel_fields_are_reported_per_label() -> None:
    texts, y = _rows(40, seed=2)
    labels = [{"urgency": int(k), "tags": [int(k == j) for j in range(3)]} for k in y]
    data = LabelledTexts(texts, labels)
    result = baseline_probabilities(TAGGED, data, data, texts[:5])
    assert list(result) == ["urgency", "tags[refund]", "tags[bug]", "tags[login]"]
    assert result["urgency"].raw.shape == (5, 3) and result["urgency"].method == "temperature"
    assert result["tags[bug]"].calibrated.shape == (5, 2) and result["tags[bug]"].method == "sigmoid"

    spec = TAGGED.spec.closed_fields[1]
    raw = np.array([[0.9, 0.2, 0.5], [0.1, 0.7, 0.4]])
    views = field_views(spec, raw, raw, np.array([[1, 0, 0], [0, 1, 1]]))
    assert list(views) == ["tags[refund]", "tags[bug]", "tags[login]"]
    assert views["tags[login]"]["raw"] == pytest.approx(np.array([[0.5, 0.5], [0.6, 0.4]]))
    assert views["tags[login]"]["y"].tolist() == [0, 1]
