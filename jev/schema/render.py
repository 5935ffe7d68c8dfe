"""Turn a task's input into the text the model reads: one template, used by training and serving alike.

The template, one line per field in declaration order:

    {name}: {value}\\n

- nested models are flattened to dotted names (`customer.plan: pro`), lists of models indexed
  (`messages.0.text: hi`);
- lists, tuples and sets of scalars are joined with ", " (sets sorted, so order never depends on
  hashing);
- None is the empty string, bools are `true` / `false`, Enum members their `.value`;
- dicts are JSON with sorted keys; anything else is `str(value)`.

Multi-line values are kept as they are: the field name on the line before is what marks them.
Training and serving must render identically, or the model sees text it was not trained on; so
this is the only place input becomes text.
"""

import json
from collections.abc import Iterator
from enum import Enum
from typing import Any

from pydantic import BaseModel

from jev.schema.task import Task


def render_input(task: Task, data: BaseModel | dict[str, Any]) -> str:
    """The model text for one input (an instance of the task's input model, or a dict to validate)."""
    instance = task.parse_input(data)
    return "".join(f"{name}: {text}\n" for name, text in _lines(instance, ""))


def render_values(task: Task, data: BaseModel | dict[str, Any]) -> list[str]:
    """The rendered values alone, without the field names the template adds: what the input says."""
    return [text for _, text in _lines(task.parse_input(data), "")]


def _lines(instance: BaseModel, prefix: str) -> Iterator[tuple[str, str]]:
    for attribute in type(instance).model_fields:
        name = prefix + attribute
        value = getattr(instance, attribute)
        if isinstance(value, BaseModel):
            yield from _lines(value, name + ".")
        elif isinstance(value, list | tuple) and any(isinstance(v, BaseModel) for v in value):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    yield from _lines(item, f"{name}.{i}.")
                else:
                    yield f"{name}.{i}", _scalar(item)
        else:
            yield name, _scalar(value)


def _scalar(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return _scalar(value.value)
    if isinstance(value, set | frozenset):
        return ", ".join(sorted(_scalar(v) for v in value))
    if isinstance(value, list | tuple):
        return ", ".join(_scalar(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return str(value)
