"""Gutenberg stripping, PTB reading without execution, and the pretraining corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

from jev.data.text import read_ptb, strip_gutenberg, write_gutenberg, write_ptb

FIXTURES = Path(__file__).parent / "fixtures" / "data"


def _read(path: Path) -> str:
    with path.open(encoding="utf-8", newline="") as handle:
        return handle.read()


def test_strip_modern_gutenberg_header_and_licence() -> None:
    text = strip_gutenberg(_read(FIXTURES / "gutenberg" / "modern_gut.txt"))
    assert text == (
        "THE SONNETS\n\nFrom fairest creatures we desire increase,\nThat thereby beauty's rose might never die,\n"
    )


def test_strip_small_print_gutenberg_header() -> None:
    text = strip_gutenberg(_read(FIXTURES / "gutenberg" / "small_print_gut.txt"))
    assert text == "HAMLET, PRINCE OF DENMARK\n\nBer.\nWho's there?\n"


def test_already_stripped_text_is_unchanged() -> None:
    text = _read(FIXTURES / "gutenberg" / "stripped_gut.txt")
    assert "\r\n" in text
    assert strip_gutenberg(text) == text


def test_write_gutenberg_only_takes_gut_txt(tmp_path: Path) -> None:
    assert write_gutenberg(FIXTURES / "gutenberg", tmp_path) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["modern_gut.txt", "small_print_gut.txt", "stripped_gut.txt"]
    assert (tmp_path / "stripped_gut.txt").read_bytes() == (FIXTURES / "gutenberg" / "stripped_gut.txt").read_bytes()


def test_read_ptb_parses_without_executing() -> None:
    penn = read_ptb(FIXTURES / "ptb" / "treebank_init.py.txt")
    assert penn == {"train": " the cat sat \n on the <unk> N \n", "valid": " a dog \n", "test": " the end \n"}


def test_read_ptb_rejects_a_module_without_penn(tmp_path: Path) -> None:
    path = tmp_path / "__init__.py"
    path.write_text("penn = {}\npenn['train'] = 'x'\n", encoding="utf-8")
    with pytest.raises(ValueError, match="valid"):
        read_ptb(path)


def test_write_ptb_counts_lines(tmp_path: Path) -> None:
    assert write_ptb(FIXTURES / "ptb" / "treebank_init.py.txt", tmp_path) == {"train": 2, "valid": 1, "test": 1}
    assert (tmp_path / "train.txt").read_text(encoding="utf-8") == " the cat sat \n on the <unk> N \n"
