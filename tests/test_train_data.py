"""Corpus reading and the step -> batch mapping every rank and every resume relies on."""

import json

import pytest
import torch

from jev.train.blocks import TokenBlocks, token_stream
from jev.train.corpus import corpus_files, read_documents
from jev.train.tokenizer import train_tokenizer

CORPUS = "tests/fixtures/train/corpus"


def test_folders_expand_to_sorted_txt_and_jsonl_files():
    assert [p.name for p in corpus_files([CORPUS])] == ["messages.jsonl", "sonnets.txt", "summer.txt"]


def test_jsonl_rows_give_their_input_strings(tmp_path):
    rows = [{"input": {"subject": "Hi", "body": "there", "n": 3}}, {"input": "plain"}, {"label": "no input"}]
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    assert read_documents([tmp_path / "rows.jsonl"]) == ["Hi\nthere", "plain"]


def test_a_callable_source_and_bad_paths(tmp_path):
    assert read_documents(lambda: ["a", "", "b"]) == ["a", "b"]
    (tmp_path / "notes.md").write_text("x")
    with pytest.raises(ValueError, match="must end in"):
        read_documents([tmp_path / "notes.md"])
    with pytest.raises(FileNotFoundError):
        read_documents([tmp_path / "absent.txt"])


@pytest.fixture(scope="module")
def blocks():
    documents = read_documents([CORPUS])
    return TokenBlocks.build(train_tokenizer(documents, 300), documents, block_size=16, held_out_fraction=0.1)


def test_documents_are_joined_by_eos():
    tokenizer = train_tokenizer(["ab ab"], 260)
    stream = token_stream(tokenizer, ["ab", "ab ab"]).tolist()
    assert stream.count(1) == 2 and stream[-1] == 1
    assert stream.count(0) == 2 and stream[0] == 0, "every document starts with <bos>, as decision inputs do"
    assert stream[stream.index(1) + 1] == 0
    text = tokenizer.encode("ab").ids
    assert token_stream(tokenizer, ["ab"], bos=7, eos=9).tolist() == [7, *text, 9], "a converted model's own ids"


def test_held_out_blocks_come_after_training_blocks(blocks):
    assert blocks.train.shape[1] == 17 and len(blocks.held_out) >= 1
    assert blocks.stream_tokens >= (len(blocks.train) + len(blocks.held_out)) * 17


def test_ranks_take_disjoint_shards_that_make_up_the_global_batch(blocks):
    whole = blocks.batch(3, batch_size=4, seed=7)
    shards = [blocks.batch(3, batch_size=4, seed=7, rank=r, world_size=2) for r in range(2)]
    assert torch.equal(torch.cat(shards), whole)


def test_an_epoch_visits_distinct_blocks_and_epochs_reshuffle(blocks):
    per_epoch = blocks.steps_per_epoch(4)
    epoch = torch.cat([blocks.batch(s, 4, seed=0) for s in range(per_epoch)])
    assert len({tuple(row.tolist()) for row in epoch}) == len(epoch)
    assert not torch.equal(blocks.batch(0, 4, seed=0), blocks.batch(per_epoch, 4, seed=0))
    assert torch.equal(blocks.batch(5, 4, seed=0), blocks.batch(5, 4, seed=0))


def test_uneven_shards_and_tiny_corpora_are_refused(blocks):
    with pytest.raises(ValueError, match="multiple of the number of processes"):
        blocks.batch(0, batch_size=3, seed=0, rank=0, world_size=2)
    with pytest.raises(ValueError, match="fewer than one batch"):
        blocks.batch(0, batch_size=10_000, seed=0)
