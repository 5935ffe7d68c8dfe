"""Jev: typed decisions with calibrated probabilities from one forward pass of an MLA + DSA transformer.

The top-level names load lazily, so `import jev.schema` or `import jev.calibration` (and the
client) never pull in torch.
"""

import importlib
from typing import Any

_EXPORTS = {
    "AsyncClient": "jev.client",
    "Client": "jev.client",
    "Decided": "jev.schema",
    "Task": "jev.schema",
    "Usage": "jev.schema",
    "Decider": "jev.decide.decider",
    "LatentCache": "jev.model",
    "Model": "jev.model",
    "ModelConfig": "jev.model",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'jev' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
