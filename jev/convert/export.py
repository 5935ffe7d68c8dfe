"""Shipping a model folder: `jev export` makes it standalone, `jev pack` makes it small enough for git.

`jev export`: every weight written out, for tools that know no bases.

A Jev folder built on a registry package stores only what Jev learned and names the rest in
`base.json`. transformers (or a copy on a machine without the package) needs the whole weights:
the export assembles them once, checked against the base's hash, and copies every other file
(tokenizer, heads, `jev.json`, the drafter) as it is, and writes float32 weights, unpacked.

`jev pack`: the folder's stored matrices rewritten as GGUF Q8_0 blocks (about 1.06 bytes a number
instead of 4), in place. Loading dequantises them; what it costs in accuracy is measured, not assumed
(docs/benchmarks.md).
"""

import shutil
from pathlib import Path

from jev.decide.bundle import DRAFTER_DIR
from jev.generate.drafters.dspark import WEIGHTS_FILE as DSPARK_WEIGHTS_FILE
from jev.model import Model
from jev.model.base import BASE_FILE
from jev.model.checkpoint import INDEX_FILE, WEIGHTS_FILE, pack_weights
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


def pack_folder(folder: Path) -> list[str]:
    """Pack `folder/model.safetensors`, and a DSpark drafter's weights in `folder/drafter/`, in place;
    returns the names of the tensors now stored as Q8_0 (the drafter's prefixed `drafter/`)."""
    file = folder / WEIGHTS_FILE
    if not file.is_file():
        raise JevError(f"{folder} has no {WEIGHTS_FILE} to pack (a sharded folder is not packed)")
    Model.from_pretrained(folder)  # refuse a folder that does not load before rewriting it
    packed = pack_weights(file)
    drafter = folder / DRAFTER_DIR / DSPARK_WEIGHTS_FILE
    if drafter.is_file():
        packed += [f"{DRAFTER_DIR}/{name}" for name in pack_weights(drafter)]
    return packed
