"""compile_decision: every supported annotation compiles to its exact values, in order; others refused."""

from enum import Enum, IntEnum
from typing import Annotated, Any, Literal, Optional

import pytest
from annotated_types import Interval
from pydantic import BaseModel, Field, conint, create_model

from jev.schema import MAX_INT_VALUES, MaxTokens, UnsupportedSchemaError, compile_decision
from jev.schema.fields import DEFAULT_TEXT_TOKENS


class Color(Enum):
    RED = "red"
    GREEN = "green"


class Level(IntEnum):
    LOW = 1
    HIGH = 3


def single(annotation: Any, default: Any = ...) -> tuple[str, tuple, bool]:
    """Compile a one-field model `x: annotation` and return the field's (kind, values, nullable)."""
    spec = compile_decision(create_model("One", x=(annotation, default)))
    (field,) = spec.fields
    assert field.name == "x"
    return field.kind, field.values, field.nullable


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (Literal["b", "a", "c"], ("categorical", ("b", "a", "c"), False)),
        (Literal[3, 1, 2], ("categorical", (3, 1, 2), False)),
        (Literal[True, False], ("categorical", (True, False), False)),
        (Literal["a", None], ("categorical", ("a", None), True)),
        (Literal[None, "a", "b"], ("categorical", ("a", "b", None), True)),
        (Color, ("categorical", ("red", "green"), False)),
        (Level, ("categorical", (1, 3), False)),
        (bool, ("bool", (False, True), False)),
        (Annotated[int, Field(ge=-1, le=2)], ("int", (-1, 0, 1, 2), False)),
        (Annotated[int, Field(gt=0, lt=4)], ("int", (1, 2, 3), False)),
        (Annotated[int, Field(ge=0, le=10, multiple_of=5)], ("int", (0, 5, 10), False)),
        (Annotated[int, Interval(ge=1, le=3)], ("int", (1, 2, 3), False)),
        (conint(ge=7, le=8), ("int", (7, 8), False)),
        (Annotated[int, Field(ge=0, le=MAX_INT_VALUES - 1)], ("int", tuple(range(MAX_INT_VALUES)), False)),
        (set[Literal["x", "y"]], ("multilabel", ("x", "y"), False)),
        (frozenset[Color], ("multilabel", ("red", "green"), False)),
        (list[Literal[2, 1]], ("multilabel", (2, 1), False)),
        (Optional[Literal["a", "b"]], ("categorical", ("a", "b", None), True)),  # noqa: UP045
        (Color | None, ("categorical", ("red", "green", None), True)),
        (bool | None, ("bool", (False, True, None), True)),
        (Annotated[int, Field(ge=0, le=1)] | None, ("int", (0, 1, None), True)),
        (str, ("text", (), False)),
        (str | None, ("text", (), True)),
    ],
)
def test_supported_annotations_compile_to_exact_values(annotation: Any, expected: tuple) -> None:
    assert single(annotation) == expected


def test_bounds_given_on_field_apply_to_optional_int() -> None:
    assert single(Optional[int], Field(None, ge=2, le=3)) == ("int", (2, 3, None), True)  # noqa: UP045


def test_n_values_counts_choices_or_labels() -> None:
    spec = compile_decision(
        create_model("M", a=(Literal["x", "y"] | None, ...), b=(set[Color], ...), c=(str, ...))
    )
    assert [f.n_values for f in spec.fields] == [3, 2, 0]


class Address(BaseModel):
    country: Literal["fr", "de"]
    verified: bool


class Person(BaseModel):
    age: Annotated[int, Field(ge=0, le=3)]
    address: Address
    note: str


class Outer(BaseModel):
    person: Person
    flag: bool


def test_nested_models_flatten_to_dotted_names_depth_first() -> None:
    spec = compile_decision(Outer)
    assert [f.name for f in spec.fields] == [
        "person.age",
        "person.address.country",
        "person.address.verified",
        "person.note",
        "flag",
    ]
    assert [f.name for f in spec.closed_fields] == [
        "person.age",
        "person.address.country",
        "person.address.verified",
        "flag",
    ]
    assert [f.name for f in spec.text_fields] == ["person.note"]


def test_text_fields_carry_a_token_limit_into_the_layout() -> None:
    class Limited(BaseModel):
        short: Annotated[str, MaxTokens(8)]
        free: str

    spec = compile_decision(Limited)
    assert [(f.name, f.max_tokens) for f in spec.text_fields] == [("short", 8), ("free", DEFAULT_TEXT_TOKENS)]
    assert spec.layout()["fields"][0] == {"name": "short", "kind": "text", "values": [], "nullable": False,
                                          "max_tokens": 8}
    assert compile_decision(Person).field("note").max_tokens == DEFAULT_TEXT_TOKENS
    with pytest.raises(ValueError, match="positive int"):
        MaxTokens(0)


class FloatDecision(BaseModel):
    score: float


@pytest.mark.parametrize(
    ("annotation", "fragment"),
    [
        (float, "float"),
        (dict[str, int], "dict[str, int]"),
        (int, "needs both bounds"),
        (Annotated[int, Field(ge=0)], "needs both bounds"),
        (Annotated[int, Field(ge=0, le=MAX_INT_VALUES)], "span 102 values"),
        (Annotated[int, Field(ge=3, le=2)], "admit no value"),
        (list[str], "multi-label"),
        (set[int], "multi-label"),
        (set, "set"),
        (tuple[Literal["a"], ...], "tuple"),
        (Any, "Any"),
        (Literal["a"] | Literal["b"], "union"),
        (int | str, "union"),
        (set[Literal["a", "b"]] | None, "Optional multi-label"),
        (set[Literal["a", None]], "None as a label"),
        (Literal[1.5, 2.5], "str, int or bool"),
        (Address | None, "nested model cannot be Optional"),
    ],
)
def test_unsupported_annotation_is_refused_with_path_and_supported_list(
    annotation: Any, fragment: str
) -> None:
    model = create_model("Bad", ok=(bool, ...), inner=(create_model("Inner", y=(annotation, ...)), ...))
    with pytest.raises(UnsupportedSchemaError) as caught:
        compile_decision(model)
    message = str(caught.value)
    assert [p["loc"] for p in caught.value.problems] == ["inner.y"]
    assert fragment in caught.value.problems[0]["msg"]
    assert "inner.y" in message
    assert "supported field types:" in message
    assert "set/frozenset/list of a Literal or an Enum" in message


def test_every_unsupported_field_is_listed_at_once() -> None:
    model = create_model("Bad", a=(float, ...), b=(bool, ...), c=(dict, ...))
    with pytest.raises(UnsupportedSchemaError) as caught:
        compile_decision(model)
    assert [p["loc"] for p in caught.value.problems] == ["a", "c"]


def test_enum_whose_values_are_not_json_scalars_is_refused() -> None:
    class Weight(Enum):
        LIGHT = 0.5
        HEAVY = 2.5

    with pytest.raises(UnsupportedSchemaError, match=r"w: .*str, int or bool"):
        compile_decision(create_model("M", w=(Weight, ...)))


def test_literal_mixing_enum_member_and_its_value_is_refused_as_colliding() -> None:
    with pytest.raises(UnsupportedSchemaError, match="same wire value"):
        compile_decision(create_model("M", c=(Literal[Color.RED, "red"], ...)))


def test_true_and_one_are_distinct_values() -> None:
    assert single(Literal[1, True]) == ("categorical", (1, True), False)


def test_empty_model_and_non_model_are_refused() -> None:
    with pytest.raises(UnsupportedSchemaError, match="no fields"):
        compile_decision(create_model("Empty"))
    with pytest.raises(UnsupportedSchemaError, match="pydantic model class"):
        compile_decision(dict)  # type: ignore[arg-type]


class Node(BaseModel):
    label: bool
    child: "Node"


def test_recursive_model_is_refused() -> None:
    with pytest.raises(UnsupportedSchemaError, match=r"child: .*contains itself"):
        compile_decision(Node)
