"""The tokenizer rebuilt from SmolLM2's GGUF against llama.cpp's own ids (`fixtures/smollm2_tokens.json`).

The fixture was written by `fixtures/smollm2_tokens.py` with llama-cpp-python, the program the GGUF
was made for; it covers Latin, CJK, Cyrillic, Hebrew, Devanagari, Tamil, Hangul, digits, code,
whitespace runs and the chat markers.
"""

import json
from pathlib import Path

import pytest

from jev.convert.source import read_gguf_tokenizer, smollm2_gguf

pytestmark = pytest.mark.slow

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "smollm2_tokens.json").read_text())


@pytest.fixture(scope="module")
def tokenizer():
    return read_gguf_tokenizer(smollm2_gguf())


@pytest.mark.slow
@pytest.mark.parametrize("row", FIXTURE["rows"], ids=lambda row: row["text"][:24])
def test_ids_equal_llama_cpp(tokenizer, row):
    assert tokenizer.encode(row["text"]).ids == row["ids"]


@pytest.mark.parametrize("row", FIXTURE["rows"], ids=lambda row: row["text"][:24])
def test_decoding_gives_the_text_back(tokenizer, row):
    assert tokenizer.decode(row["ids"], skip_special_tokens=False) == row["text"]
