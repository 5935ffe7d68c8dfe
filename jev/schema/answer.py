"""A decision written as text: compact JSON, closed fields first, then text fields, each in declaration order.

    {"kind": "spam", "mailing_list": false, "reply": false, "subject": "Win a cruise"}

Decision fine-tuning teaches the language model this text after the input, so one checkpoint can
answer two ways: the heads in one pass, or by writing the JSON (Jev's constrained decoding, or
Outlines on transformers). Text fields are written after every closed field, so they are
conditioned on the decided values.

The text is a list of segments, and each segment is tokenised on its own: JSON syntax with the
field names, then each value with the space before it (` "spam"`, ` false`, ` ["a", "b"]`). So the
tokens of a field's value never depend on its neighbours: training, constrained decoding and
exact scoring all see the same token sequence for the same value. A text field's content is a
segment of its own between the quotes of the syntax around it, so its end is the first token
holding a `"` (see `is_text_end`).

Nested decision models are written as nested objects under their field aliases; multi-label values
as arrays in label order.
"""

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jev.schema.errors import UnsupportedSchemaError
from jev.schema.fields import FieldSpec
from jev.schema.spec import DecisionSpec


@dataclass(frozen=True)
class Segment:
    """A piece of the answer text: JSON syntax (`field` None), or the value of the named field."""

    text: str
    field: str | None = None


def answer_fields(spec: DecisionSpec) -> tuple[FieldSpec, ...]:
    """The order fields are written in: closed fields, then text fields."""
    return spec.closed_fields + spec.text_fields


def value_text(spec: FieldSpec, value: Any) -> str:
    """A closed field's value segment: a space, then the JSON of its wire value."""
    if spec.kind == "multilabel":
        chosen = {spec.index(v) for v in value}
        value = [label for i, label in enumerate(spec.values) if i in chosen]
    else:
        value = spec.values[spec.index(value)]
    return " " + json.dumps(value, ensure_ascii=False)


def text_content(text: str) -> str:
    """A text value's content segment: the JSON string without its quotes."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def is_text_end(token_text: str) -> bool:
    """Whether a generated token ends a text value: any `"` does (an escaped quote inside a value is
    written as two tokens in training, since content and syntax are separate segments)."""
    return '"' in token_text


# A backslash and the escape it starts, if it starts a valid one.
_ESCAPE = re.compile(r'\\(["\\/bfnrt]|u[0-9a-fA-F]{4})?')


def parse_text(content: str) -> str:
    """A generated content segment back to the text it spells. The model may write what JSON refuses,
    and a decision must still be answered: a backslash that starts no valid escape is kept as written,
    one left dangling at the end (its escape cut off by the closing quote) is dropped, control
    characters pass, and a lone surrogate becomes U+FFFD so the answer can be encoded."""
    if (len(content) - len(content.rstrip("\\"))) % 2:
        content = content[:-1]
    escaped = _ESCAPE.sub(lambda m: m.group(0) if m.group(1) else "\\\\", content)
    text = json.loads('"' + escaped + '"', strict=False)
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def answer_segments(spec: DecisionSpec, values: Mapping[str, Any]) -> list[Segment]:
    """The segments of the whole answer for `values` (dotted field name -> python or wire value)."""
    segments: list[Segment] = []
    syntax = "{"
    path: list[str] = []
    has_member = [False]
    closed: set[tuple[str, ...]] = set()
    for field in answer_fields(spec):
        keys = field.input_keys or field.path
        common = _common_prefix(path, keys[:-1])
        while len(path) > common:
            closed.add(tuple(path))
            syntax += "}"
            path.pop()
            has_member.pop()
        for key in keys[len(path) : -1]:
            if (*path, key) in closed:
                raise UnsupportedSchemaError(
                    f"{spec.model.__name__} cannot be written as one JSON answer:",
                    [{"loc": field.name, "msg": "a text field inside a nested model that also has closed fields"}],
                    "declare text fields at the top level of the decision model",
                )
            syntax += _member(key, has_member) + " {"
            path.append(key)
            has_member.append(False)
        syntax += _member(keys[-1], has_member)
        if field.kind == "text":
            segments += [Segment(syntax + ' "'), Segment(text_content(values[field.name]), field.name)]
            syntax = '"'
        else:
            segments += [Segment(syntax), Segment(value_text(field, values[field.name]), field.name)]
            syntax = ""
    segments.append(Segment(syntax + "}" * len(has_member)))
    return segments


def answer_text(spec: DecisionSpec, values: Mapping[str, Any]) -> str:
    """The answer as one string (what the segments spell)."""
    return "".join(segment.text for segment in answer_segments(spec, values))


def _member(key: str, has_member: list[bool]) -> str:
    """`"key":` with the comma before it when the enclosing object already has a member."""
    separator = ", " if has_member[-1] else ""
    has_member[-1] = True
    return separator + json.dumps(key, ensure_ascii=False) + ":"


def _common_prefix(a: list[str], b: tuple[str, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n
