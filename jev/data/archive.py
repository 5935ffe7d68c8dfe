"""Unpacking downloaded archives without trusting their member names.

Registry archives are third-party input: a member named ``../../x`` or an absolute path, a
symlink or a device file must never be written outside the target folder, whatever Python's
version-dependent ``tarfile`` filters do. Only folders and regular files are extracted.
"""

from __future__ import annotations

import shutil
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

from jev.schema import JevError


class UnsafeArchiveError(JevError, ValueError):
    """An archive member would land outside the target folder or is not a plain file."""


def _target(dest: Path, name: str, archive: Path) -> Path:
    """Where member ``name`` goes under ``dest``, refusing absolute and ``..`` paths."""
    member = PurePosixPath(name.replace("\\", "/"))
    if member.is_absolute() or ".." in member.parts or (member.parts and ":" in member.parts[0]):
        raise UnsafeArchiveError(f"{archive.name}: member {name!r} escapes the target folder")
    return dest.joinpath(*member.parts)


def _extract_tar(archive: Path, dest: Path) -> None:
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:
            target = _target(dest, member.name, archive)
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                if source is None:
                    raise UnsafeArchiveError(f"{archive.name}: member {member.name!r} is unreadable")
                with source, target.open("wb") as sink:
                    shutil.copyfileobj(source, sink)
            else:
                raise UnsafeArchiveError(f"{archive.name}: member {member.name!r} is a link or device")


def _extract_zip(archive: Path, dest: Path) -> None:
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            target = _target(dest, info.filename, archive)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zipped.open(info) as source, target.open("wb") as sink:
                shutil.copyfileobj(source, sink)


def safe_extract(archive: Path, dest: Path) -> None:
    """Extract a ``.tgz``/``.tar.gz``/``.tar`` or ``.whl``/``.zip`` archive into ``dest``."""
    archive, dest = Path(archive), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(archive):
        _extract_zip(archive, dest)
    elif tarfile.is_tarfile(archive):
        _extract_tar(archive, dest)
    else:
        raise UnsafeArchiveError(f"{archive} is neither a tar nor a zip archive")
