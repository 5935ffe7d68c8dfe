"""JSON-lines reading and writing shared by every prepared data set.

One place decides the on-disk format (UTF-8, one object per line, non-ASCII kept verbatim) so
that prepared files are byte-stable across runs and readable by any tool.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the objects of a JSON-lines file lazily, so large splits need not fit in memory."""
    with Path(path).open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def write_jsonl(rows: Iterable[dict[str, Any]], path: Path) -> int:
    """Write rows one per line and return how many, creating the parent folder if needed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8", newline="\n") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count
