"""The byte-level BPE tokenizer: exact round trips, fixed special ids, determinism, transformers parity."""

import pytest
from transformers import PreTrainedTokenizerFast

from jev.tokenizer import TokenizerError, load_tokenizer, save_tokenizer
from jev.train.corpus import read_documents
from jev.train.tokenizer import train_tokenizer

CORPUS = ["tests/fixtures/train/corpus"]
SAMPLES = [
    "Shall I compare thee to a summer's day?",
    "café, naïve, déjà vu, Ærøskøbing",
    "東京の天気は明日晴れるでしょうか。",
    "שלום, מה שלומך היום?",
    "fire 🔥 and folded hands 🙏🏽, flag 🇮🇱",
    "  leading spaces,\ttabs\nand\r\nnewlines  ",
    "never seen: ζωή, Привет, ∮ E⋅da = Q",
]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(read_documents(CORPUS), vocab_size=400)


@pytest.mark.parametrize("text", SAMPLES)
def test_decode_of_encode_is_the_text(tokenizer, text):
    ids = tokenizer.encode(text).ids
    assert tokenizer.decode(ids) == text


def test_special_tokens_have_fixed_ids_and_nothing_is_added(tokenizer):
    assert [tokenizer.token_to_id(t) for t in ("<bos>", "<eos>", "<pad>")] == [0, 1, 2]
    ids = tokenizer.encode("Shall I").ids
    assert 0 not in ids and 1 not in ids
    assert tokenizer.encode("<eos>").ids == [1]


def test_same_texts_give_the_same_tokenizer(tokenizer):
    again = train_tokenizer(read_documents(CORPUS), vocab_size=400)
    assert again.to_str() == tokenizer.to_str()


def test_transformers_loads_the_file_and_encodes_identically(tokenizer, tmp_path):
    file = save_tokenizer(tokenizer, tmp_path)
    reference = PreTrainedTokenizerFast(tokenizer_file=str(file))
    ours = load_tokenizer(tmp_path)
    for text in SAMPLES:
        ids = ours.encode(text).ids
        assert reference.encode(text) == ids
        assert reference.decode(ids) == text


def test_load_refuses_missing_and_corrupt_files(tmp_path):
    with pytest.raises(TokenizerError, match="no tokenizer"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="cannot read"):
        load_tokenizer(tmp_path)


def test_vocab_size_too_small_for_the_bytes_is_refused():
    with pytest.raises(ValueError, match="at least 259"):
        train_tokenizer(["abc"], vocab_size=100)
