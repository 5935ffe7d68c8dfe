"""Compile a pydantic decision model into a `DecisionSpec`: the fields the heads decide, in order.

The spec is the contract between a schema and a trained model. Its `layout()` lists every field's
name, kind, values and nullability; its `hash` fingerprints that layout, so a checkpoint can refuse
a schema that changed since training (see `check_layout`) instead of silently misreading heads.
"""

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, cast

from pydantic import BaseModel, PydanticUndefinedAnnotation, ValidationError

from jev.schema.changes import describe_changes
from jev.schema.errors import (
    InvalidDecisionError,
    Problem,
    SchemaMismatchError,
    UnsupportedSchemaError,
    problems_from,
)
from jev.schema.fields import SUPPORTED_TYPES, FieldSpec, Refused, field_spec, type_name, unwrap

LAYOUT_VERSION = 1


@dataclass(frozen=True)
class DecisionSpec:
    """A compiled decision model: its fields flattened to dotted names, in declaration order."""

    model: type[BaseModel]
    fields: tuple[FieldSpec, ...]

    @property
    def closed_fields(self) -> tuple[FieldSpec, ...]:
        """The fields decided in the one forward pass, one query token each, in this order."""
        return tuple(f for f in self.fields if f.is_closed)

    @property
    def text_fields(self) -> tuple[FieldSpec, ...]:
        """The `str` fields, which only the generation path can fill."""
        return tuple(f for f in self.fields if not f.is_closed)

    def field(self, name: str) -> FieldSpec:
        """The field with this dotted name; KeyError listing the names otherwise."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(
            f"{self.model.__name__} has no field {name!r}; fields: {[f.name for f in self.fields]}"
        )

    def layout(self) -> dict[str, Any]:
        """Canonical JSON-able description of the heads; what the hash is taken of."""
        return {"layout_version": LAYOUT_VERSION, "fields": [f.layout() for f in self.fields]}

    @cached_property
    def hash(self) -> str:
        """sha256 hex of the canonical JSON of `layout()`."""
        return layout_hash(self.layout())

    def build(self, values: Mapping[str, Any]) -> BaseModel:
        """An instance of the decision model from dotted names -> values, validated by pydantic.

        Values may be python or wire values (`"low"` or `Priority.LOW`); multi-label values are any
        iterable of labels and come back in the container the annotation names, in label order.
        """
        problems: list[Problem] = []
        nested: dict[str, Any] = {}
        for name, value in values.items():
            try:
                spec = self.field(name)
                python = _to_python(spec, value)
            except (KeyError, ValueError, TypeError) as error:
                problems.append({"loc": name, "msg": str(error.args[0])})
                continue
            target = nested
            for key in spec.input_keys[:-1]:
                target = target.setdefault(key, {})
            target[spec.input_keys[-1]] = python
        if problems:
            raise InvalidDecisionError(f"cannot build {self.model.__name__}:", problems)
        return self._validate(nested)

    def values_of(self, decision: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
        """Every field's python value by dotted name; a mapping is validated by the decision model first."""
        instance = decision if isinstance(decision, self.model) else self._validate(decision)
        values = {}
        for f in self.fields:
            value: Any = instance
            for attribute in f.path:
                value = getattr(value, attribute)
            values[f.name] = value
        return values

    def encode_label(self, label: BaseModel | Mapping[str, Any]) -> dict[str, int | list[int]]:
        """Training targets for every closed field: the value's index, or 0/1 per label for multi-label.

        A mapping is validated by the decision model first (nested form, as in the data files).
        """
        values = self.values_of(label)
        targets: dict[str, int | list[int]] = {}
        for f in self.closed_fields:
            if f.kind == "multilabel":
                chosen = {f.index(v) for v in values[f.name]}
                targets[f.name] = [int(i in chosen) for i in range(f.n_values)]
            else:
                targets[f.name] = f.index(values[f.name])
        return targets

    def _validate(self, data: Any) -> BaseModel:
        if not isinstance(data, Mapping):
            raise InvalidDecisionError(
                f"expected a {self.model.__name__} or a mapping:",
                [{"loc": "$", "msg": f"got {type(data).__name__}"}],
            )
        try:
            return self.model.model_validate(data)
        except ValidationError as error:
            raise InvalidDecisionError(f"invalid {self.model.__name__}:", problems_from(error)) from None


def compile_decision(model: type[BaseModel]) -> DecisionSpec:
    """Compile a decision model; UnsupportedSchemaError lists every field that cannot be decided."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise UnsupportedSchemaError(
            "a decision must be a pydantic model class:", [{"loc": "$", "msg": f"got {model!r}"}]
        )
    fields: list[FieldSpec] = []
    problems: list[Problem] = []
    _collect(model, (), (), fields, problems, (model,))
    if not fields and not problems:
        problems.append({"loc": "$", "msg": "the model has no fields"})
    if problems:
        raise UnsupportedSchemaError(
            f"{model.__name__} cannot be compiled into a decision:", problems, SUPPORTED_TYPES
        )
    return DecisionSpec(model, tuple(fields))


def layout_hash(layout: Mapping[str, Any]) -> str:
    """sha256 hex of a layout's canonical JSON (sorted keys, no spaces, ASCII)."""
    canonical = json.dumps(layout, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def check_layout(spec: DecisionSpec, trained_layout: Mapping[str, Any], task: str = "") -> None:
    """Raise SchemaMismatchError, naming what changed, if `spec` is not the layout a model was trained on."""
    if layout_hash(trained_layout) != spec.hash:
        raise SchemaMismatchError(describe_changes(trained_layout, spec.layout()), task)


def _to_python(spec: FieldSpec, value: Any) -> Any:
    """The python value pydantic should get for one field, from a python or wire value."""
    if spec.kind == "text":
        return value
    if spec.kind != "multilabel":
        return spec.to_python(value)
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TypeError(f"a multi-label value is a set or list of labels, got {value!r}")
    chosen = {spec.index(v) for v in value}
    container = cast(type, spec.container)
    return container(c for i, c in enumerate(spec.choices) if i in chosen)


def _collect(
    model: type[BaseModel],
    path: tuple[str, ...],
    keys: tuple[str, ...],
    fields: list[FieldSpec],
    problems: list[Problem],
    enclosing: tuple[type[BaseModel], ...],
) -> None:
    """Append the flattened fields of `model` (depth first, declaration order) or their problems."""
    try:
        model.model_rebuild()
    except PydanticUndefinedAnnotation as error:
        problems.append({"loc": ".".join(path) or "$", "msg": f"cannot resolve an annotation: {error}"})
        return
    for attribute, info in model.model_fields.items():
        name = ".".join((*path, attribute))
        alias = info.validation_alias if isinstance(info.validation_alias, str) else info.alias
        field_keys = (*keys, alias or attribute)
        try:
            tp, metadata, nullable = unwrap(info.annotation, info.metadata)
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                if nullable:
                    raise Refused("a nested model cannot be Optional; make its own fields Optional instead")
                if tp in enclosing:
                    raise Refused(f"{type_name(tp)} contains itself; a decision cannot be recursive")
                _collect(tp, (*path, attribute), field_keys, fields, problems, (*enclosing, tp))
                continue
            fields.append(field_spec(name, tp, metadata, nullable, field_keys))
        except Refused as refusal:
            problems.append({"loc": name, "msg": str(refusal)})
