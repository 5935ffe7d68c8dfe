"""chatterbot-corpus conversations (PyPI ``chatterbot-corpus``) to typed-decision rows.

Each row is ``{"id", "input": {"message"}, "label": {"language", "topic"}}``: every utterance
of every conversation in ``data/<language>/<topic>.yml``, as the data README defines it.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

# Localised file names of one topic; without this, "emotion" would be split by language and the
# topic head would learn the language instead of the topic.
TOPIC_ALIASES: dict[str, str] = {
    "emociones": "emotion",
    "emotions": "emotion",
    "psicologia": "psychology",
    "IA": "ai",
}
MIN_TOPIC_ROWS = 60
MIN_LANGUAGE_ROWS = 50


def chat_key(row: dict[str, Any]) -> str:
    """The split and identity key ``"<language>:<text>"``: one text per language, one split."""
    return f"{row['label']['language']}:{row['input']['message']}"


def _utterances(path: Path) -> Iterator[str]:
    """The stripped, non-empty utterances of one topic file, in file order.

    ``BaseLoader`` keeps every scalar as the text that was written, so a line such as ``yes``
    or ``1.0`` is not turned into a bool or float; it also builds nothing but str, list and dict.
    """
    document = yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.BaseLoader) or {}
    for conversation in document.get("conversations") or []:
        for utterance in conversation:
            if isinstance(utterance, str) and utterance.strip():
                yield utterance.strip()


def _all_rows(data_dir: Path, aliases: Mapping[str, str]) -> list[dict[str, Any]]:
    """Every distinct (language, text) row in language, then file-name order; first wins."""
    seen: set[str] = set()
    rows = []
    languages = sorted(path for path in Path(data_dir).iterdir() if path.is_dir())
    for language_dir in languages:
        for path in sorted(language_dir.glob("*.yml")):
            topic = aliases.get(path.stem, path.stem)
            for text in _utterances(path):
                row = {"input": {"message": text}, "label": {"language": language_dir.name, "topic": topic}}
                key = chat_key(row)
                if key not in seen:
                    seen.add(key)
                    rows.append({"id": hashlib.sha256(key.encode("utf-8")).hexdigest()[:16], **row})
    return rows


def read_chats(
    data_dir: Path,
    *,
    aliases: Mapping[str, str] = TOPIC_ALIASES,
    min_topic_rows: int = MIN_TOPIC_ROWS,
    min_language_rows: int = MIN_LANGUAGE_ROWS,
) -> list[dict[str, Any]]:
    """Rows of ``data_dir/<language>/<topic>.yml`` with rare topics and languages dropped.

    Both thresholds count the deduplicated rows before either drop, so the two drops do not
    depend on each other's order (``hindi`` keeps its place with 50 rows though only 21 of them
    are in kept topics). Classes this small cannot be learnt or scored reliably.
    """
    rows = _all_rows(data_dir, aliases)
    topics = Counter(row["label"]["topic"] for row in rows)
    languages = Counter(row["label"]["language"] for row in rows)
    return [
        row
        for row in rows
        if topics[row["label"]["topic"]] >= min_topic_rows and languages[row["label"]["language"]] >= min_language_rows
    ]
