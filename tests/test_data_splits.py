"""The split rule of the data README, checked against an independent hashlib computation."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from jev.data.splits import SPLITS, bucket, split_of, write_splits


def _expected_bucket(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:4], "big") % 100


def _key_with_bucket(target: int) -> str:
    """The first ``k<i>`` key whose bucket is ``target``, found by search."""
    for i in range(100_000):
        key = f"k{i}"
        if _expected_bucket(key) == target:
            return key
    raise AssertionError(f"no key with bucket {target}")


@pytest.mark.parametrize("key", ["7c53336b37003a9286aba55d2945844c", "english:What is AI?", "persian:سلام", ""])
def test_bucket_matches_first_32_bits_of_sha256(key: str) -> None:
    assert bucket(key) == _expected_bucket(key)


def test_bucket_of_known_keys() -> None:
    # Hand-computed: sha256("a") starts ca978112 -> 3398926610 % 100 == 10, and so on.
    assert bucket("a") == 3398926610 % 100 == 10
    assert bucket("english:hello") == int(hashlib.sha256(b"english:hello").hexdigest()[:8], 16) % 100


@pytest.mark.parametrize(
    ("target", "split"),
    [
        (0, "train"),
        (69, "train"),
        (70, "valid"),
        (79, "valid"),
        (80, "calib"),
        (89, "calib"),
        (90, "test"),
        (99, "test"),
    ],
)
def test_split_boundaries(target: int, split: str) -> None:
    key = _key_with_bucket(target)
    assert bucket(key) == target
    assert split_of(key) == split


def test_write_splits_partitions_in_stable_order(tmp_path: Path) -> None:
    keys = [_key_with_bucket(b) for b in (95, 5, 75, 85, 6, 96)]
    rows = [{"id": key, "text": f"row {i} ü"} for i, key in enumerate(keys)]
    counts = write_splits(rows, lambda row: row["id"], tmp_path)
    assert counts == {"train": 2, "valid": 1, "calib": 1, "test": 2}
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(f"{s}.jsonl" for s in SPLITS)
    lines = (tmp_path / "test.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["id"] for line in lines] == [keys[0], keys[5]]
    assert "ü" in lines[0], "non-ASCII must be written as UTF-8, not escaped"


def test_write_splits_writes_empty_splits(tmp_path: Path) -> None:
    counts = write_splits([{"id": _key_with_bucket(1)}], lambda row: row["id"], tmp_path)
    assert counts == {"train": 1, "valid": 0, "calib": 0, "test": 0}
    assert (tmp_path / "calib.jsonl").read_text(encoding="utf-8") == ""
