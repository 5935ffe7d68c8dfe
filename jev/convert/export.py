"""Shipping a model folder: `jev export` makes it standalone, `jev pack` makes it small enough for git.

`jev export`: every weight written out, for tools that know no bases.

A Jev folder built on a registry package stores only what Jev learned and names the rest in
`base.json`. transformers (or a copy on a machine without the package) needs the whole weights:
the export assembles them once, checked against the base's hash, and copies every other file
(tokenizer, heads, `jev.json`, the drafter) as it is, and writes float32 weights, unpacked.

`jev pack`: the folder's stored matrices rewritten as GGUF Q8_0 blocks (about 1.06 bytes a number
instead of 4), in place. Loading dequantises them; what it costs in accuracy is measured, not assumed
(docs/benchmarks.md). With `--base-folder` it also drops the weights another (committed) folder
stores identically, and names them in `base.json`: a decider fine-tuned from a committed backbone
stores only the layers it trained.
"""

import os
import shutil
from dataclasses import replace
from pathlib import Path

import torch

from jev.decide.bundle import DRAFTER_DIR
from jev.digest import file_sha256
from jev.generate.drafters.dspark import WEIGHTS_FILE as DSPARK_WEIGHTS_FILE
from jev.generate.drafters.eagle import WEIGHTS_FILE as EAGLE_WEIGHTS_FILE
from jev.model import Model
from jev.model.base import BASE_FILE, BaseReference, FolderBase
from jev.model.checkpoint import INDEX_FILE, WEIGHTS_FILE, drop_weights, pack_weights, read_safetensors
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
    """Pack `folder/model.safetensors`, and a DSpark or EAGLE drafter's weights in `folder/drafter/`, in
    place; returns the names of the tensors now stored as Q8_0 (the drafter's prefixed `drafter/`)."""
    file = folder / WEIGHTS_FILE
    if not file.is_file():
        raise JevError(f"{folder} has no {WEIGHTS_FILE} to pack (a sharded folder is not packed)")
    Model.from_pretrained(folder)  # refuse a folder that does not load before rewriting it
    packed = pack_weights(file)
    for name in (DSPARK_WEIGHTS_FILE, EAGLE_WEIGHTS_FILE):
        drafter = folder / DRAFTER_DIR / name
        if drafter.is_file():
            packed += [f"{DRAFTER_DIR}/{tensor}" for tensor in pack_weights(drafter)]
    return packed


def repoint_base_folder(folder: Path, base_folder: Path) -> BaseReference:
    """`folder`'s base reference, its base folder path re-pointed to `base_folder` (and saved) when the
    folder was packed on a base folder whose weights hash the same; refused when they differ.

    The path is relative, so a packed folder moved (from `runs/` into `models/`) stops loading until
    it is packed again on the same base at its new place.
    """
    reference = BaseReference.load(folder)
    if reference is None:
        raise JevError(f"{folder} names no base package; --base-folder is for a folder built on one")
    under = BaseReference.load(base_folder)
    if under is not None and under.folder is not None:
        raise JevError(f"{base_folder} names a base folder itself; a base folder must store its weights")
    path = os.path.relpath(base_folder.resolve(), folder.resolve())
    if reference.folder is None or reference.folder.path == path:
        return reference
    if reference.folder.sha256 != file_sha256(base_folder / WEIGHTS_FILE):
        raise JevError(f"{folder} is packed on {reference.folder.path}, whose weights are not {base_folder}'s")
    reference = replace(reference, folder=replace(reference.folder, path=path))
    reference.save(folder)
    return reference


def name_base_folder(folder: Path, base_folder: Path) -> list[str]:
    """Drop from `folder`'s weights those `base_folder` stores with the same values and name them in
    `base.json`; returns every name `base.json` now gives. The assembled model is checked to be unchanged."""
    reference = repoint_base_folder(folder, base_folder)
    path = os.path.relpath(base_folder.resolve(), folder.resolve())
    before = Model.from_pretrained(folder).state_dict()
    theirs = read_safetensors(base_folder / WEIGHTS_FILE)
    mine = read_safetensors(folder / WEIGHTS_FILE)
    same = {name for name, t in mine.items() if name in theirs and _same(t, theirs[name])}
    named = sorted(same | set(reference.folder.tensors if reference.folder else []))
    if not same:
        return named
    drop_weights(folder / WEIGHTS_FILE, same)
    replace(reference, folder=FolderBase(path, file_sha256(base_folder / WEIGHTS_FILE), named)).save(folder)
    after = Model.from_pretrained(folder).state_dict()
    if any(not torch.equal(after[name], tensor) for name, tensor in before.items()):
        raise JevError(f"{folder} assembled on {base_folder} differs from before: a bug, report it")
    return named


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
