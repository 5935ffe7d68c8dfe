"""The two closed kinds, each defined once: what their heads' losses, decisions and confidences are."""

import math

import pytest
import torch

from jev.decide.kinds import ANY_OF, ONE_OF, kind_of
from schemas.examples import TASK as EXAMPLE_TASK


def test_each_field_of_the_example_task_has_its_kind() -> None:
    kinds = {spec.name: kind_of(spec) for spec in EXAMPLE_TASK.spec.closed_fields}
    assert kinds["products"] is ANY_OF and kinds["priority"] is ONE_OF and kinds["customer.churn_risk"] is ONE_OF
    with pytest.raises(ValueError, match="not a closed one"):
        kind_of(EXAMPLE_TASK.spec.field("summary"))


def test_losses_are_the_likelihoods_written_out() -> None:
    logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 1.0, -3.0]], dtype=torch.float64)
    index = torch.tensor([2, 1])
    softmax = logits.exp() / logits.exp().sum(-1, keepdim=True)
    assert float(ONE_OF.loss(logits, index)) == pytest.approx(-(math.log(softmax[0, 2]) + math.log(softmax[1, 1])) / 2)
    labels = torch.tensor([[1, 0, 1], [0, 0, 0]])
    p = torch.sigmoid(logits)
    by_hand = -torch.where(labels.bool(), p.log(), (1 - p).log()).mean()
    assert float(ANY_OF.loss(logits, labels)) == pytest.approx(float(by_hand))


def test_decisions_and_confidences() -> None:
    table = {"low": 0.2, "high": 0.7, "mid": 0.1}
    assert ONE_OF.choose(table) == "high" and ONE_OF.confidence(table) == 0.7
    labels = {"api": 0.9, "web": 0.4, "app": 0.55}
    assert ANY_OF.choose(labels) == ["api", "app"] and ANY_OF.confidence(labels) == pytest.approx(0.55)
    logits = torch.tensor([[3.0, -1.0, 0.2], [0.1, 0.3, -2.0]])
    assert ONE_OF.correct(logits, torch.tensor([0, 0])).tolist() == [True, False]
    assert ANY_OF.correct(logits, torch.tensor([[1, 0, 1], [1, 0, 0]])).tolist() == [True, False]


def test_binary_methods_apply_where_one_probability_is_calibrated() -> None:
    assert ONE_OF.calibration_method(2, "isotonic") == "isotonic"
    assert ONE_OF.calibration_method(5, "isotonic") == "temperature"
    assert ANY_OF.calibration_method(5, "platt") == "platt"
