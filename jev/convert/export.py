"""`jev export`: a model folder made standalone, every weight written out, for tools that know no bases.

A Jev folder built on a registry package stores only what Jev learned and names the rest in
`base.json`. transformers (or a copy on a machine without the package) needs the whole weights:
the export assembles them once, checked against the base's hash, and copies every other file
(tokenizer, heads, `jev.json`, the drafter) as it is.
"""

import shutil
from pathlib import Path

from jev.model import Model
from jev.model.base import BASE_FILE
from jev.model.checkpoint import INDEX_FILE, WEIGHTS_FILE
from jev.schema import JevError

_REWRITTEN = {BASE_FILE, WEIGHTS_FILE, INDEX_FILE}


def export_folder(folder: Path, out: Path) -> Path:
    """Write `folder` as a standalone copy at `out` (which must not exist yet); returns `out`."""
    if out.exists():
        raise JevError(f"{out} exists; export writes a new folder, pass another --out")
    if out.resolve().is_relative_to(folder.resolve()):
        raise JevError(f"--out {out} is inside the folder being exported")
    model = Model.from_pretrained(folder)
    top = str(folder)
    shutil.copytree(folder, out, ignore=lambda where, names: [n for n in names if where == top and n in _REWRITTEN])
    model.save_pretrained(out, standalone=True)
    return out
