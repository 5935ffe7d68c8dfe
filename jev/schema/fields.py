"""One field of a decision: its kind, the values it can take, and how they map to python.

A closed field's `values` are its wire values (JSON scalars; an Enum member travels as its
`.value`) in the fixed order the decision heads index into. `choices` holds the python values in
the same order, so a head's index maps back to what the user's model expects. Values are matched
by type as well as by equality, because `True == 1` in python but not on the wire.
"""

import math
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic.fields import FieldInfo

FieldKind = Literal["categorical", "bool", "int", "multilabel", "text"]

CLOSED_KINDS: frozenset[str] = frozenset({"categorical", "bool", "int", "multilabel"})

MAX_INT_VALUES = 101

DEFAULT_TEXT_TOKENS = 64


@dataclass(frozen=True)
class MaxTokens:
    """How many tokens a text field may be generated with: `subject: Annotated[str, MaxTokens(24)]`.

    A text field without it gets DEFAULT_TEXT_TOKENS. The limit bounds the cache a decision
    reserves and the work a request can ask for.
    """

    tokens: int

    def __post_init__(self) -> None:
        if not isinstance(self.tokens, int) or isinstance(self.tokens, bool) or self.tokens < 1:
            raise ValueError(f"MaxTokens needs a positive int, got {self.tokens!r}")

SUPPORTED_TYPES = (
    "supported field types: Literal[...] of str/int/bool values; an Enum with str/int values; bool; "
    f"int with ge/le (or gt/lt) bounds spanning at most {MAX_INT_VALUES} values; "
    "set/frozenset/list of a Literal or an Enum (multi-label); Optional[...] of any of these "
    "except multi-label (use an empty set for 'no label'); a nested pydantic model; "
    "str (a text field, generated; Annotated[str, MaxTokens(n)] bounds its length)"
)

_MULTILABEL_CONTAINERS = (set, frozenset, list)


class Refused(Exception):
    """Internal: why one annotation cannot be a decision field; the compiler adds the field path."""


@dataclass(frozen=True)
class FieldSpec:
    """A decision field as the heads see it.

    `values` (wire values) decide the layout and hash; `choices`, `container` and `input_keys`
    only say how to rebuild the user's python objects, so they stay out of equality.
    Nullable single-choice fields have `None` as their last value. Multi-label fields list their
    labels in `values` and are never nullable. Text fields have no values and a token limit.
    """

    name: str
    kind: FieldKind
    values: tuple[Any, ...]
    nullable: bool
    max_tokens: int = 0
    choices: tuple[Any, ...] = field(default=(), compare=False, repr=False)
    container: type | None = field(default=None, compare=False, repr=False)
    input_keys: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @property
    def n_values(self) -> int:
        """How many values a head scores: choices for single-choice fields, labels for multi-label."""
        return len(self.values)

    @property
    def is_closed(self) -> bool:
        return self.kind in CLOSED_KINDS

    @property
    def path(self) -> tuple[str, ...]:
        """Attribute names from the decision model down to this field."""
        return tuple(self.name.split("."))

    def index(self, value: Any) -> int:
        """Position of a value (python or wire form) in `values`; ValueError naming the values if absent."""
        wire = to_wire(value)
        for i, candidate in enumerate(self.values):
            if same_value(candidate, wire):
                return i
        raise ValueError(f"{value!r} is not one of {list(self.values)!r}")

    def to_python(self, value: Any) -> Any:
        """The python value (enum member, literal, int, bool or None) for a python or wire value."""
        return self.choices[self.index(value)]

    def layout(self) -> dict[str, Any]:
        """The JSON-able part that defines the heads and the answer text: name, kind, values, nullable
        (and a text field's token limit)."""
        layout = {"name": self.name, "kind": self.kind, "values": list(self.values), "nullable": self.nullable}
        if self.kind == "text":
            layout["max_tokens"] = self.max_tokens
        return layout


def to_wire(value: Any) -> Any:
    """The wire form of a python value: an Enum member becomes its `.value`, anything else stays."""
    return value.value if isinstance(value, Enum) else value


def same_value(a: Any, b: Any) -> bool:
    """Equality that tells `True` from `1`, as JSON does."""
    return type(a) is type(b) and a == b


def unwrap(annotation: Any, metadata: Sequence[Any]) -> tuple[Any, list[Any], bool]:
    """Strip Annotated and Optional: (inner type, all constraint metadata, whether None is allowed)."""
    inner, meta = _strip_annotated(annotation, metadata)
    if get_origin(inner) in (Union, types.UnionType):
        args = get_args(inner)
        others = [a for a in args if a is not type(None)]
        if len(others) != 1:
            names = " | ".join(type_name(a) for a in args)
            raise Refused(f"the union {names} is not supported; a field may be Optional[X], not X | Y")
        inner, meta = _strip_annotated(others[0], meta)
        return inner, meta, len(others) < len(args)
    return inner, meta, False


def field_spec(
    name: str, tp: Any, metadata: list[Any], nullable: bool, input_keys: tuple[str, ...]
) -> FieldSpec:
    """The FieldSpec for an unwrapped annotation, or Refused saying why it is not supported."""
    kind, choices, container = _classify(tp, metadata)
    if kind == "multilabel" and nullable:
        raise Refused("an Optional multi-label field is not supported; use an empty set for 'no label'")
    if kind == "categorical" and None in choices:
        nullable = True
        choices = tuple(c for c in choices if c is not None)
    if nullable and kind != "text":
        choices = (*choices, None)
    values = tuple(to_wire(c) for c in choices)
    max_tokens = _max_tokens(metadata) if kind == "text" else 0
    return FieldSpec(name, kind, values, nullable, max_tokens, choices, container, input_keys)


def _max_tokens(metadata: list[Any]) -> int:
    limits = [item.tokens for item in metadata if isinstance(item, MaxTokens)]
    return limits[-1] if limits else DEFAULT_TEXT_TOKENS


def type_name(tp: Any) -> str:
    """A readable name for an annotation: `float`, `dict[str, int]`, `Literal['a', 'b']`."""
    if isinstance(tp, type) and not get_args(tp):
        return tp.__name__
    return repr(tp).replace("typing.", "")


def _strip_annotated(tp: Any, metadata: Sequence[Any]) -> tuple[Any, list[Any]]:
    meta = list(metadata)
    while get_origin(tp) is Annotated:
        tp, *extra = get_args(tp)
        for item in extra:
            meta.extend(item.metadata if isinstance(item, FieldInfo) else [item])
    return tp, meta


def _classify(tp: Any, metadata: list[Any]) -> tuple[FieldKind, tuple[Any, ...], type | None]:
    if tp is str:
        return "text", (), None
    if tp is bool:
        return "bool", (False, True), None
    if tp is int:
        return "int", _int_range(metadata), None
    choices = _choices(tp)
    if choices is not None:
        return "categorical", choices, None
    if get_origin(tp) in _MULTILABEL_CONTAINERS:
        return "multilabel", _labels(tp), get_origin(tp)
    raise Refused(f"{type_name(tp)} is not a supported decision field type")


def _choices(tp: Any) -> tuple[Any, ...] | None:
    """The python values of a Literal or Enum, checked to be distinct JSON scalars; None otherwise."""
    if get_origin(tp) is Literal:
        choices = get_args(tp)
    elif isinstance(tp, type) and issubclass(tp, Enum):
        choices = tuple(tp)
        if not choices:
            raise Refused(f"the Enum {tp.__name__} has no members")
    else:
        return None
    wires = [to_wire(c) for c in choices]
    bad = [w for w in wires if w is not None and not isinstance(w, str | int)]
    if bad:
        raise Refused(f"{type_name(tp)} has values {bad!r}; decision values must be str, int or bool")
    if any(same_value(a, b) for i, a in enumerate(wires) for b in wires[i + 1 :]):
        raise Refused(f"{type_name(tp)} has two values with the same wire value {wires!r}")
    return choices


def _labels(tp: Any) -> tuple[Any, ...]:
    args = get_args(tp)
    inner = _strip_annotated(args[0], ())[0] if len(args) == 1 else None
    labels = _choices(inner)
    if labels is None:
        raise Refused(
            f"{type_name(tp)} is not supported; a multi-label field is a set/frozenset/list "
            "of a Literal or an Enum, e.g. set[Literal['a', 'b']]"
        )
    if None in labels:
        raise Refused(f"{type_name(tp)} has None as a label; a multi-label field cannot hold None")
    return labels


def _int_range(metadata: list[Any]) -> tuple[int, ...]:
    low: int | None = None
    high: int | None = None
    step = 1
    for item in metadata:
        if getattr(item, "ge", None) is not None:
            low = math.ceil(item.ge)
        if getattr(item, "gt", None) is not None:
            low = math.floor(item.gt) + 1
        if getattr(item, "le", None) is not None:
            high = math.floor(item.le)
        if getattr(item, "lt", None) is not None:
            high = math.ceil(item.lt) - 1
        if getattr(item, "multiple_of", None) is not None:
            step = item.multiple_of
    if low is None or high is None:
        raise Refused(
            "an int field needs both bounds, e.g. Field(ge=0, le=10); an unbounded int is not closed"
        )
    values = tuple(v for v in range(low, high + 1) if v % step == 0)
    if not values:
        raise Refused(f"the int bounds {low}..{high} (multiple of {step}) admit no value")
    if len(values) > MAX_INT_VALUES:
        raise Refused(
            f"the int bounds {low}..{high} span {len(values)} values; at most {MAX_INT_VALUES} are supported"
        )
    return values
