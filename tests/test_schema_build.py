"""DecisionSpec.build and encode_label: values <-> the user's typed model, through pydantic."""

from enum import Enum
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from jev.schema import InvalidDecisionError, compile_decision


class Priority(Enum):
    LOW = "low"
    HIGH = "high"


class Area(Enum):
    EU = "eu"
    US = "us"


class Customer(BaseModel):
    plan: Literal["free", "pro"]
    regions: frozenset[Area]


class Decision(BaseModel):
    priority: Priority
    team: Literal["billing", "tech"] | None
    severity: Annotated[int, Field(ge=1, le=3)]
    products: set[Literal["web", "api", "mobile"]]
    steps: list[Literal["refund", "call"]]
    customer: Customer
    summary: str = ""


SPEC = compile_decision(Decision)

VALUES = {
    "priority": "high",
    "team": None,
    "severity": 2,
    "products": ["api", "web"],
    "steps": {"call", "refund"},
    "customer.plan": "pro",
    "customer.regions": ["us"],
}


def test_build_returns_an_instance_of_the_users_model_with_nested_and_multilabel_values() -> None:
    decision = SPEC.build(VALUES)
    assert type(decision) is Decision
    assert decision.priority is Priority.HIGH
    assert decision.team is None
    assert decision.severity == 2
    assert decision.products == {"web", "api"}
    assert decision.steps == ["refund", "call"]  # label order, whatever order they came in
    assert type(decision.customer) is Customer
    assert decision.customer == Customer(plan="pro", regions=frozenset({Area.US}))
    assert decision.summary == ""


def test_build_accepts_python_values_as_well_as_wire_values() -> None:
    assert SPEC.build({**VALUES, "priority": Priority.HIGH, "customer.regions": {Area.US}}) == SPEC.build(
        VALUES
    )


def test_enum_round_trips_through_wire_values_and_indices() -> None:
    field = SPEC.field("priority")
    assert field.values == ("low", "high")
    assert field.choices == (Priority.LOW, Priority.HIGH)
    for member in Priority:
        index = field.index(member)
        assert field.values[index] == member.value
        assert SPEC.build({**VALUES, "priority": field.values[index]}).priority is member


def test_build_refuses_unknown_names_and_values_with_their_location() -> None:
    with pytest.raises(InvalidDecisionError) as caught:
        SPEC.build({**VALUES, "colour": "red", "team": "sales", "products": "web"})
    problems = {p["loc"]: p["msg"] for p in caught.value.problems}
    assert set(problems) == {"colour", "team", "products"}
    assert "'billing', 'tech', None" in problems["team"]
    assert "set or list of labels" in problems["products"]


def test_build_reports_missing_required_fields_from_pydantic() -> None:
    values = {k: v for k, v in VALUES.items() if k != "customer.plan"}
    with pytest.raises(InvalidDecisionError) as caught:
        SPEC.build(values)
    assert [p["loc"] for p in caught.value.problems] == ["customer.plan"]


LABEL = {
    "priority": "low",
    "team": "tech",
    "severity": 3,
    "products": ["mobile", "web"],
    "steps": [],
    "customer": {"plan": "free", "regions": ["eu", "us"]},
}

TARGETS = {
    "priority": 0,
    "team": 1,
    "severity": 2,
    "products": [1, 0, 1],
    "steps": [0, 0],
    "customer.plan": 0,
    "customer.regions": [1, 1],
}


def test_encode_label_gives_indices_and_label_indicators_for_closed_fields_only() -> None:
    assert SPEC.encode_label(LABEL) == TARGETS


def test_encode_label_of_instance_equals_encode_of_dict() -> None:
    assert SPEC.encode_label(Decision.model_validate(LABEL)) == TARGETS


def test_encode_label_puts_null_last() -> None:
    assert SPEC.encode_label({**LABEL, "team": None})["team"] == 2


def test_encode_label_validates_dicts_and_names_every_bad_field() -> None:
    with pytest.raises(InvalidDecisionError) as caught:
        SPEC.encode_label({**LABEL, "priority": "urgent", "severity": 9})
    assert [p["loc"] for p in caught.value.problems] == ["priority", "severity"]


def test_encode_label_refuses_other_types() -> None:
    with pytest.raises(InvalidDecisionError, match="got list"):
        SPEC.encode_label([1, 2])  # type: ignore[arg-type]


def test_encode_then_build_is_the_identity() -> None:
    original = Decision.model_validate({**LABEL, "summary": "s"})
    targets = SPEC.encode_label(original)
    values = {}
    for field in SPEC.closed_fields:
        target = targets[field.name]
        if isinstance(target, list):
            values[field.name] = [v for v, on in zip(field.values, target, strict=True) if on]
        else:
            values[field.name] = field.values[target]
    assert SPEC.build({**values, "summary": "s"}) == original


class Aliased(BaseModel):
    kind: Literal["a", "b"] = Field(alias="Kind")


def test_build_uses_aliases_where_the_model_declares_them() -> None:
    assert compile_decision(Aliased).build({"kind": "b"}).kind == "b"
