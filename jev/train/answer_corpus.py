"""Distillation text in the target's own domain: each labelled row as the model reads and answers it.

A drafter is only as good as its match to the target on the text the target writes. For a decision
model that text is the answer after the input (`jev.schema.answer`), text fields included, so the
drafter learns from documents `render_input(row) + answer JSON` of a task's labelled rows
(`AnswerDocuments`), or of the answers the target itself gives them (`OwnAnswers`): the text it
drafts on when serving, not the text people wrote (DistillSpec's on-policy data).
"""

import json
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from tqdm import tqdm

from jev.data.examples import row_label
from jev.decide.decider import Decider
from jev.model.weights import Weights
from jev.schema import Task, load_task, render_input
from jev.schema.answer import answer_text


def _rows(paths: list[Path]) -> Iterator[dict[str, Any]]:
    for path in paths:
        with open(path, encoding="utf-8") as rows:
            yield from (json.loads(line) for line in rows if line.strip())


class AnswerDocuments:
    """A text source (`jev.train.corpus.TextSource`): the answered rows of JSONL files for one task."""

    def __init__(self, reference: str, paths: list[Path]) -> None:
        self.reference = reference
        self.task: Task = load_task(reference)
        self.paths = paths

    def __call__(self) -> list[str]:
        spec = self.task.spec
        return [
            render_input(self.task, row["input"]) + answer_text(spec, spec.values_of(row_label(row, self.task)))
            for row in _rows(self.paths)
        ]

    def __repr__(self) -> str:
        return f"answers of {self.reference} in {[str(p) for p in self.paths]}"


class OwnAnswers(AnswerDocuments):
    """The first `rows` rows, each answered by the target as `jev decide` answers it: its decided closed
    values and its text fields written greedily, in place of the labels."""

    def __init__(self, reference: str, paths: list[Path], target: Path, rows: int, weights: Weights) -> None:
        super().__init__(reference, paths)
        if rows <= 0:
            raise ValueError(f"the target answers a positive number of rows, not {rows}")
        self.target, self.rows, self.weights = target, rows, weights

    def __call__(self) -> list[str]:
        decider = Decider.load(self.target, tasks=[self.task], check_policies=False, speculative=False,
                               weights=self.weights)
        inputs = [row["input"] for row in islice(_rows(self.paths), self.rows)]
        spec, step = self.task.spec, decider.max_batch
        documents = []
        for start in tqdm(range(0, len(inputs), step), desc="the target answers", unit="batch"):
            batch = inputs[start : start + step]
            for data, decided in zip(batch, decider.decide_batch(self.task.decision_model, batch), strict=True):
                documents.append(render_input(self.task, data) + answer_text(spec, spec.values_of(decided.value)))
        return documents

    def __repr__(self) -> str:
        paths = [str(p) for p in self.paths]
        return f"{self.target}'s own answers to the first {self.rows} rows of {self.reference} in {paths}"
