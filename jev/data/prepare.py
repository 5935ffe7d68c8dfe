"""Raw packages -> the prepared splits every other part of Jev reads, and where to find them.

``prepare`` is offline and deterministic: the same raw packages give byte-identical files, so
prepared data can be deleted and rebuilt at any time and never needs to be committed.
"""

from __future__ import annotations

import os
from pathlib import Path

from jev.data.chat import chat_key, read_chats
from jev.data.fetch import unpacked
from jev.data.jsonl import read_jsonl
from jev.data.mail import mail_key, read_mails
from jev.data.splits import SPLITS, write_splits
from jev.data.text import PTB_SPLITS, write_gutenberg, write_ptb

__all__ = ["DEFAULT_DATA_DIR", "locate", "prepare", "read_jsonl"]

DEFAULT_DATA_DIR = Path("data")
_SPLITS_OF_TASK: dict[str, tuple[tuple[str, ...], str]] = {
    "mail": (SPLITS, "jsonl"),
    "chat": (SPLITS, "jsonl"),
    "ptb": (PTB_SPLITS, "txt"),
}


def prepare(raw_dir: Path, out_dir: Path) -> dict[str, dict[str, int]]:
    """Write ``out_dir/{mail,chat}/<split>.jsonl``, ``out_dir/ptb/*.txt`` and ``out_dir/gutenberg``.

    Returns the rows per split of mail and chat, the lines per PTB split and the number of
    Gutenberg texts, for the caller to compare with the data README.
    """
    raw = unpacked(raw_dir)
    out_dir = Path(out_dir)
    return {
        "mail": write_splits(read_mails(raw["mail"]), mail_key, out_dir / "mail"),
        "chat": write_splits(read_chats(raw["chat"]), chat_key, out_dir / "chat"),
        "ptb": write_ptb(raw["ptb"], out_dir / "ptb"),
        "gutenberg": {"texts": write_gutenberg(raw["gutenberg"], out_dir / "gutenberg")},
    }


def data_dir_default() -> Path:
    """``$JEV_DATA`` when set, else ``./data`` (the git-ignored folder of the checkout)."""
    return Path(os.environ.get("JEV_DATA") or DEFAULT_DATA_DIR)


def locate(task: str, split: str, data_dir: Path | None = None) -> Path:
    """The prepared file of ``task`` (mail, chat, ptb) and ``split``; fails early if absent."""
    if task not in _SPLITS_OF_TASK:
        raise ValueError(f"unknown data task {task!r}; expected one of {sorted(_SPLITS_OF_TASK)}")
    splits, suffix = _SPLITS_OF_TASK[task]
    if split not in splits:
        raise ValueError(f"{task} has no split {split!r}; expected one of {list(splits)}")
    root = Path(data_dir) if data_dir is not None else data_dir_default()
    path = root / task / f"{split}.{suffix}"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: run `jev data fetch && jev data prepare` (or set JEV_DATA to the "
            "folder that holds the prepared data)"
        )
    return path
