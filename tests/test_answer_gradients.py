"""The gradient diagnostic's Adam-dilution factor, on second moments whose answer share is known."""

import math

from benchmarks.answer_gradients import decision_step_kept


def test_the_decision_step_shrinks_with_the_answers_share_of_the_second_moment() -> None:
    decision = {"a": 4.0, "b": 1.0, "unused": 0.0}
    assert decision_step_kept(decision, {}) == [1.0, 1.0]
    kept = decision_step_kept(decision, {"a": 4.0, "b": 3.0})
    assert math.isclose(kept[0], math.sqrt(0.5)) and math.isclose(kept[1], 0.5)
