"""File digests, shared by the data fetcher, the converter and base-package checks (a leaf module)."""

import hashlib
from pathlib import Path


def file_sha256(path: Path) -> str:
    """The file's SHA-256, read in 1 MiB blocks so a large file never sits in memory."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
