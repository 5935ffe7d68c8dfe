"""The decision service: a litestar app built from a decider folder, with dynamic batching.

    app = create_app("models/default", ServeSettings(max_batch=32))

Names load lazily so `jev.serve.keys`, which the client shares, never imports litestar.
"""

import importlib
from typing import Any

_EXPORTS = {
    "create_app": "jev.serve.app",
    "ServeSettings": "jev.serve.settings",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'jev.serve' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
