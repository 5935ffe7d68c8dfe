"""How a field's value becomes a JSON object key in `probs`, shared by the server and the client.

JSON keys are strings, so `probs["urgent"]` cannot be keyed by `true` on the wire. A str value is
its own key and every other value (bool, int, None) is its JSON text: `"true"`, `"3"`, `"null"`.
The client maps keys back with the same function over the field's values, so `Decided.probs`
holds the same typed keys remotely as locally. Standard library only: the client imports it, and never the server.
"""

import json
from collections.abc import Iterable
from typing import Any


def probability_key(value: Any) -> str:
    """The wire key of one wire value (str, int, bool or None)."""
    return value if isinstance(value, str) else json.dumps(value)


def keys_for(field: str, values: Iterable[Any]) -> dict[str, Any]:
    """Key -> value for one field; ValueError if two values share a key (e.g. `"1"` and `1`)."""
    table: dict[str, Any] = {}
    for value in values:
        key = probability_key(value)
        if key in table:
            raise ValueError(
                f"field {field!r} has values {table[key]!r} and {value!r} that share the JSON key {key!r}; "
                "rename one so probabilities can travel as a JSON object"
            )
        table[key] = value
    return table
