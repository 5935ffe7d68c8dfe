"""Compile a pydantic model into a msgspec Struct with the same JSON shape, once per task.

pydantic stays the schema language users write; the server decodes requests and encodes answers
with msgspec, which is several times faster and gives litestar an exact OpenAPI schema per task.
The Struct checks types and the common constraints (bounds, lengths, patterns); pydantic still
validates every input afterwards, because only it knows a model's custom validators. A type the
compiler cannot express becomes `Any` on the wire, so pydantic alone judges that field. Optional
fields are `UNSET` when absent, so pydantic, not the Struct, fills in their defaults. Unknown
fields are refused whatever the model's `extra` setting: the model reads only declared fields
(`jev.schema.render`), so accepting others would let a caller believe it read them.
"""

import datetime
import decimal
import enum
import types
import uuid
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec
from pydantic import BaseModel
from pydantic.fields import FieldInfo

_SCALARS = (str, int, float, bool, bytes, datetime.datetime, datetime.date, datetime.time, uuid.UUID, decimal.Decimal)
_CONSTRAINTS = ("gt", "ge", "lt", "le", "multiple_of", "min_length", "max_length", "pattern")
_SEQUENCES = {list: list, tuple: tuple, set: list, frozenset: list}


class StructCompiler:
    """Turns pydantic models into Structs named `<prefix><Model>`; one compiler per task's namespace."""

    def __init__(self, prefix: str, module: str) -> None:
        self.prefix = prefix
        self.module = module
        self._done: dict[type[BaseModel], type[msgspec.Struct]] = {}

    def struct(self, model: type[BaseModel], name: str | None = None) -> type[msgspec.Struct]:
        if model in self._done:
            return self._done[model]
        specs = [self._field(attribute, info) for attribute, info in model.model_fields.items()]
        struct = msgspec.defstruct(
            name or f"{self.prefix}{model.__name__}", specs, kw_only=True, forbid_unknown_fields=True,
            module=self.module,
        )
        self._done[model] = struct
        return struct

    def _field(self, attribute: str, info: FieldInfo) -> tuple[str, Any, Any]:
        wire = _checked(self._type(info.annotation, info.metadata, info.description))
        alias = info.validation_alias if isinstance(info.validation_alias, str) else info.alias
        rename = {"name": alias} if alias and alias != attribute else {}
        if info.is_required():
            return attribute, wire, msgspec.field(**rename)
        return attribute, wire | msgspec.UnsetType, msgspec.field(default=msgspec.UNSET, **rename)

    def _type(self, annotation: Any, metadata: list[Any], description: str | None = None) -> Any:
        inner, constraints = _strip(annotation, metadata)
        wire = self._bare(inner)
        meta = {k: v for k, v in constraints.items() if v is not None}
        if description:
            meta["description"] = description
        if not meta or wire is Any:
            return wire
        constrained = Annotated[wire, msgspec.Meta(**meta)]
        return constrained if _decodable(constrained) else wire

    def _bare(self, tp: Any) -> Any:
        origin, args = get_origin(tp), get_args(tp)
        if tp is None or tp is type(None):
            return None
        if tp in _SCALARS or origin is Literal or (isinstance(tp, type) and issubclass(tp, enum.Enum)):
            return tp
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return self.struct(tp)
        if origin in (Union, types.UnionType):
            return _checked(Union[tuple(self._type(a, []) for a in args)])  # noqa: UP007
        if origin in _SEQUENCES and args:
            if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
                return _checked(tuple[tuple(self._type(a, []) for a in args)])
            return _SEQUENCES[origin][self._type(args[0], [])]
        if origin is dict and len(args) == 2:
            return _checked(dict[self._type(args[0], []), self._type(args[1], [])])
        return Any


def _strip(tp: Any, metadata: list[Any]) -> tuple[Any, dict[str, Any]]:
    """Peel Annotated layers, gathering the constraints pydantic and annotated-types attach."""
    items = list(metadata)
    while get_origin(tp) is Annotated:
        tp, *extra = get_args(tp)
        for item in extra:
            items.extend(item.metadata if isinstance(item, FieldInfo) else [item])
    constraints: dict[str, Any] = {}
    for item in items:
        for name in _CONSTRAINTS:
            if getattr(item, name, None) is not None:
                constraints[name] = getattr(item, name)
    return tp, constraints


def _decodable(tp: Any) -> bool:
    try:
        msgspec.json.Decoder(tp)
    except TypeError:
        return False
    return True


def _checked(tp: Any) -> Any:
    """`tp` if msgspec can decode it (some unions it cannot), else `Any`."""
    return tp if _decodable(tp) else Any
