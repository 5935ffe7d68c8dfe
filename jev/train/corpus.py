"""Where pretraining text comes from: `.txt` files, `.jsonl` files, folders of them, or a callable.

A `.txt` file is one document. A `.jsonl` row is one document: its `input` field if that is a
string, else the string values of the `input` object joined by newlines (the prepared mail and
chat splits keep their text there). Files are read in sorted order so a corpus is always the same
sequence of documents.
"""

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from jev.data.jsonl import read_jsonl

TextSource = Callable[[], Iterable[str]] | Sequence[str | Path]
CORPUS_SUFFIXES = (".txt", ".jsonl")


def read_documents(source: TextSource) -> list[str]:
    """Every non-empty document of `source`, in order."""
    documents = source() if callable(source) else _documents_in(corpus_files(source))
    return [doc for doc in documents if doc]


def corpus_files(paths: Sequence[str | Path]) -> list[Path]:
    """The `.txt` / `.jsonl` files named by `paths`, folders expanded recursively in sorted order."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in CORPUS_SUFFIXES))
        elif path.is_file() and path.suffix in CORPUS_SUFFIXES:
            files.append(path)
        elif path.exists():
            raise ValueError(f"{path}: corpus files must end in {' or '.join(CORPUS_SUFFIXES)}")
        else:
            raise FileNotFoundError(f"corpus path {path} does not exist")
    if not files:
        raise ValueError(f"no {' or '.join(CORPUS_SUFFIXES)} files in {[str(p) for p in paths]}")
    return files


def describe_source(source: TextSource) -> str | list[str]:
    """How provenance records a source: its paths, a function's qualified name, or an object's repr."""
    if callable(source):
        if hasattr(source, "__qualname__"):
            return f"callable {source.__module__}.{source.__qualname__}"
        return repr(source)
    return [str(p) for p in source]


def _documents_in(files: Iterable[Path]) -> Iterator[str]:
    for file in files:
        if file.suffix == ".txt":
            yield file.read_text(encoding="utf-8")
        else:
            yield from (_row_text(row) for row in read_jsonl(file))


def _row_text(row: dict[str, Any]) -> str:
    value = row.get("input")
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(v for v in value.values() if isinstance(v, str))
    return ""
