"""chatterbot-corpus parsing on the tiny YAML tree in ``tests/fixtures/data/chat``."""

from __future__ import annotations

import hashlib
from pathlib import Path

from jev.data.chat import MIN_LANGUAGE_ROWS, MIN_TOPIC_ROWS, chat_key, read_chats

FIXTURES = Path(__file__).parent / "fixtures" / "data" / "chat"


def _pairs(rows: list[dict]) -> list[tuple[str, str, str]]:
    return [(r["label"]["language"], r["label"]["topic"], r["input"]["message"]) for r in rows]


def test_everything_kept_without_thresholds() -> None:
    rows = read_chats(FIXTURES, min_topic_rows=0, min_language_rows=0)
    assert _pairs(rows) == [
        ("english", "ai", "What is AI?"),
        ("english", "ai", "A field of science."),
        ("english", "ai", "yes"),
        ("english", "emotion", "I am happy"),
        ("english", "emotion", "Glad to hear"),
        ("english", "emotion", "Me too"),
        ("english", "food", "Pizza?"),
        ("english", "food", "Yes please"),
        ("klingon", "ai", "nuqneH"),
        ("klingon", "ai", "What is AI?"),
        ("spanish", "ai", "¿Qué es la IA?"),
        ("spanish", "ai", "Una ciencia."),
        ("spanish", "emotion", "Estoy feliz"),
        ("spanish", "emotion", "I am happy"),
        ("spanish", "psychology", "¿Cómo te sientes?"),
        ("spanish", "psychology", "Bien"),
    ]


def test_ids_are_the_sha256_prefix_of_the_key() -> None:
    for row in read_chats(FIXTURES, min_topic_rows=0, min_language_rows=0):
        assert row["id"] == hashlib.sha256(chat_key(row).encode()).hexdigest()[:16]
        assert list(row) == ["id", "input", "label"]


def test_small_topics_and_languages_dropped() -> None:
    rows = read_chats(FIXTURES, min_topic_rows=3, min_language_rows=3)
    assert {r["label"]["topic"] for r in rows} == {"ai", "emotion"}
    assert {r["label"]["language"] for r in rows} == {"english", "spanish"}
    assert len(rows) == 10


def test_language_threshold_counts_rows_before_the_topic_drop() -> None:
    # spanish has 6 rows, 4 of them in topics that survive: 6 >= 6 keeps it.
    rows = read_chats(FIXTURES, min_topic_rows=3, min_language_rows=6)
    assert sum(r["label"]["language"] == "spanish" for r in rows) == 4
    rows = read_chats(FIXTURES, min_topic_rows=3, min_language_rows=7)
    assert {r["label"]["language"] for r in rows} == {"english"}


def test_readme_thresholds_are_the_defaults() -> None:
    assert (MIN_TOPIC_ROWS, MIN_LANGUAGE_ROWS) == (60, 50)
    assert read_chats(FIXTURES) == []


def test_topic_threshold_is_inclusive() -> None:
    # ai has 7 rows over three languages, emotion 5.
    assert {r["label"]["topic"] for r in read_chats(FIXTURES, min_topic_rows=7, min_language_rows=0)} == {"ai"}
    assert read_chats(FIXTURES, min_topic_rows=8, min_language_rows=0) == []
