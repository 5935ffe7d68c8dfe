"""Say in words how two decision layouts differ, so a schema mismatch tells the user what to undo.

Values are compared by their JSON text, which keeps `true` apart from `1` and works the same on a
layout read back from a checkpoint's JSON as on a freshly compiled one.
"""

import json
from collections.abc import Mapping, Sequence
from typing import Any


def describe_changes(old_layout: Mapping[str, Any], new_layout: Mapping[str, Any]) -> list[str]:
    """Sentences naming the fields added, removed, re-kinded, re-valued or reordered from old to new."""
    old = {f["name"]: f for f in old_layout.get("fields", [])}
    new = {f["name"]: f for f in new_layout.get("fields", [])}
    changes = [f"field {name!r} was added ({_summary(new[name])})" for name in new if name not in old]
    changes += [
        f"field {name!r} was removed (it was {_summary(old[name])})" for name in old if name not in new
    ]
    for name in (n for n in new if n in old):
        changes += _field_changes(name, old[name], new[name])
    kept_old = [n for n in old if n in new]
    kept_new = [n for n in new if n in old]
    if kept_old != kept_new:
        changes.append(f"fields were reordered from {kept_old} to {kept_new}")
    if not changes and _canonical(old_layout) != _canonical(new_layout):
        changes.append(
            f"the layout format changed (layout_version {old_layout.get('layout_version')} "
            f"-> {new_layout.get('layout_version')})"
        )
    return changes


def _field_changes(name: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    if old["kind"] != new["kind"]:
        return [f"field {name!r} changed kind from {old['kind']} to {new['kind']}"]
    changes = []
    if old["nullable"] != new["nullable"]:
        changes.append(f"field {name!r} {'became' if new['nullable'] else 'is no longer'} nullable")
    old_values = [_canonical(v) for v in old["values"] if v is not None]
    new_values = [_canonical(v) for v in new["values"] if v is not None]
    added = [v for v in new_values if v not in old_values]
    removed = [v for v in old_values if v not in new_values]
    if added:
        changes.append(f"field {name!r} gained values {_join(added)}")
    if removed:
        changes.append(f"field {name!r} lost values {_join(removed)}")
    if not added and not removed and old_values != new_values:
        changes.append(
            f"field {name!r} values were reordered from {_join(old_values)} to {_join(new_values)}"
        )
    return changes


def _summary(field: Mapping[str, Any]) -> str:
    values = [_canonical(v) for v in field["values"]]
    return f"{field['kind']}, values {_join(values)}" if values else field["kind"]


def _join(values: Sequence[str]) -> str:
    return "[" + ", ".join(values) + "]"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
