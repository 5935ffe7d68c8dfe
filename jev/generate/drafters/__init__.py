"""Drafters: cheap models that propose the next few tokens for the target to verify
(`jev.generate.drafters.protocol` says what a drafter does).

A drafter folder says its kind in `drafter.json` ("autoregressive" when absent); `load_drafter`
reads it and returns the right drafter, so callers need not know which kind they load. A
"lookup" folder holds only `drafter.json` (its settings, `max_ngram` and `hold`): the n-gram
lookup drafter has no weights.
"""

import json
from pathlib import Path

from jev.generate.drafters.autoregressive import AutoregressiveDrafter
from jev.generate.drafters.dspark import DSparkDrafter
from jev.generate.drafters.eagle import EagleDrafter
from jev.generate.drafters.lookup import LookupDrafter
from jev.generate.drafters.protocol import DRAFTER_FILE, Draft, Drafter, ReadsTargetStates
from jev.model import Model

KINDS = ("autoregressive", "dspark", "eagle", "lookup")
__all__ = ["DRAFTER_FILE", "KINDS", "Draft", "Drafter", "ReadsTargetStates", "drafter_kind", "load_drafter"]


def drafter_kind(path: str | Path) -> str:
    """The kind a drafter folder declares in `drafter.json`; "autoregressive" when it says none."""
    marker = Path(path) / DRAFTER_FILE
    kind = json.loads(marker.read_text()).get("kind", "autoregressive") if marker.is_file() else "autoregressive"
    if kind not in KINDS:
        raise ValueError(f"{path}: unknown drafter kind {kind!r} (known: {', '.join(KINDS)})")
    return kind


def load_drafter(path: str | Path, target: Model) -> Drafter:
    """The drafter in folder `path`, in the target's dtype, checked against the target's vocabulary."""
    kind = drafter_kind(path)
    if kind == "dspark":
        return DSparkDrafter.load(path, target)
    if kind == "eagle":
        return EagleDrafter.load(path, target)
    if kind == "lookup":
        settings = json.loads((Path(path) / DRAFTER_FILE).read_text())
        given = {name: settings[name] for name in ("max_ngram", "hold") if name in settings}
        return LookupDrafter(target.config.vocab_size, **given)
    return AutoregressiveDrafter.load(path, target)
