"""``prepare`` end to end on the fixtures, ``locate``, and the ``jev data`` argparse hook."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from jev.data.cli import add_commands
from jev.data.fetch import PACKAGES
from jev.data.prepare import locate, prepare, read_jsonl

FIXTURES = Path(__file__).parent / "fixtures" / "data"


@pytest.fixture
def raw_dir(tmp_path: Path) -> Path:
    """The fixtures laid out as ``fetch`` leaves the four unpacked packages."""
    paths = {p.name: tmp_path / "raw" / p.name / p.data_path for p in PACKAGES}
    for eml in (FIXTURES / "mail").glob("*/*.eml"):
        number, md5, _ = eml.name.split(".")
        record = {"checksum": {"value": md5}, "text": eml.read_text(encoding="utf-8")}
        target = paths["mail"] / eml.parent.name / f"{number}.{md5}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(record), encoding="utf-8")
    shutil.copytree(FIXTURES / "chat", paths["chat"])
    shutil.copytree(FIXTURES / "gutenberg", paths["gutenberg"])
    paths["ptb"].parent.mkdir(parents=True)
    shutil.copy(FIXTURES / "ptb" / "treebank_init.py.txt", paths["ptb"])
    return tmp_path / "raw"


def test_prepare_writes_every_task(raw_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "prepared"
    counts = prepare(raw_dir, out)
    assert sum(counts["mail"].values()) == 4
    assert sum(counts["chat"].values()) == 0, "fixture topics are far below the README thresholds"
    assert counts["ptb"] == {"train": 2, "valid": 1, "test": 1}
    assert counts["gutenberg"] == {"texts": 3}
    mail_ids = [row["id"] for split in counts["mail"] for row in read_jsonl(out / "mail" / f"{split}.jsonl")]
    assert sorted(mail_ids) == sorted(
        [
            "0df66e4c59cb2c1fcf5c1f9d997df58a",
            "663118a30093c6674c5b270aac656d66",
            "d6b1241b8f546b3543a75b5fe729a7b8",
            "4ca5c0cac626b9f93d29a08f6fd29b45",
        ]
    )
    first = {p.name: p.read_bytes() for p in (out / "mail").iterdir()}
    prepare(raw_dir, out)
    assert {p.name: p.read_bytes() for p in (out / "mail").iterdir()} == first, "prepare is deterministic"


def test_locate_finds_prepared_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "chat").mkdir()
    (tmp_path / "chat" / "calib.jsonl").write_text("", encoding="utf-8")
    assert locate("chat", "calib", tmp_path) == tmp_path / "chat" / "calib.jsonl"
    monkeypatch.setenv("JEV_DATA", str(tmp_path))
    assert locate("chat", "calib") == tmp_path / "chat" / "calib.jsonl"


def test_locate_explains_how_to_build_missing_data(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"jev data fetch && jev data prepare"):
        locate("mail", "test", tmp_path)


@pytest.mark.parametrize(("task", "split"), [("news", "train"), ("mail", "dev"), ("ptb", "calib")])
def test_locate_rejects_unknown_task_or_split(task: str, split: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        locate(task, split, tmp_path)


def test_cli_prepare_prints_counts(raw_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="jev")
    add_commands(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "cli-out"
    args = parser.parse_args(["data", "prepare", "--raw", str(raw_dir), "--out", str(out)])
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "ptb        train=2 valid=1 test=1" in printed
    assert "mail       train=" in printed
    assert (out / "mail" / "train.jsonl").is_file()


def test_cli_fetch_is_registered() -> None:
    parser = argparse.ArgumentParser(prog="jev")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["data", "fetch", "--raw", "somewhere"])
    assert args.raw == Path("somewhere")
    assert args.func.__name__ == "_fetch"
