"""The ablation benchmark's paired interval, against the normal approximation it should agree with."""

import numpy as np

from benchmarks.answer_ablation import FieldScores, paired_interval, summarise


def test_paired_interval_matches_the_normal_approximation() -> None:
    rng = np.random.default_rng(1)
    baseline = rng.random(2000) < 0.9
    correct = np.where(rng.random(2000) < 0.1, ~baseline, baseline)
    diff = correct.astype(float) - baseline.astype(float)
    half = 1.96 * diff.std() / np.sqrt(len(diff))
    low, high = paired_interval(correct, baseline)
    assert abs(low - (diff.mean() - half)) < 0.003
    assert abs(high - (diff.mean() + half)) < 0.003


def test_identical_arms_differ_by_nothing() -> None:
    rows = np.array([True, False, True, True])
    scores = {"mail.kind": FieldScores(rows, 0.5)}
    results, table = summarise({"base": [scores, scores], "same": [scores]})
    assert results["same"]["mail.kind"]["difference"] == {"points": 0.0, "ci95": [0.0, 0.0]}
    assert results["base"]["mail.kind"]["seeds"] == [75.0, 75.0]
    assert "+0.0 [+0.0, +0.0]" in table
