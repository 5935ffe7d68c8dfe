"""The deterministic split rule of the data README.

A row's split depends only on a stable key (the mail md5, or ``"<language>:<text>"`` for chat),
never on file order or a random seed, so anyone preparing the raw packages gets the same
train/valid/calib/test partition and no text can move between train and test across runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from jev.data.jsonl import write_jsonl

SPLITS: tuple[str, ...] = ("train", "valid", "calib", "test")

# Upper bucket bounds (exclusive) of each split but the last; bucket is in [0, 100).
_BOUNDS: tuple[tuple[int, str], ...] = ((70, "train"), (80, "valid"), (90, "calib"))


def bucket(key: str) -> int:
    """The key's bucket in [0, 100): the first 32 bits of its SHA-256, modulo 100."""
    return int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16) % 100


def split_of(key: str) -> str:
    """The split a key belongs to: train < 70 <= valid < 80 <= calib < 90 <= test."""
    b = bucket(key)
    for bound, name in _BOUNDS:
        if b < bound:
            return name
    return "test"


def write_splits(
    rows: Iterable[dict[str, Any]], key_fn: Callable[[dict[str, Any]], str], out_dir: Path
) -> dict[str, int]:
    """Partition rows by ``split_of(key_fn(row))`` into ``out_dir/<split>.jsonl``.

    Rows keep their input order within each split, so output is stable for a stable input.
    Every split file is written, even an empty one, so readers can rely on all four existing.
    """
    grouped: dict[str, list[dict[str, Any]]] = {name: [] for name in SPLITS}
    for row in rows:
        grouped[split_of(key_fn(row))].append(row)
    return {name: write_jsonl(grouped[name], Path(out_dir) / f"{name}.jsonl") for name in SPLITS}
