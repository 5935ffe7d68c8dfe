"""Distillation text in the target's own domain: each labelled row as the model reads and answers it.

A drafter is only as good as its match to the target on the text the target writes. For a decision
model that text is the answer after the input (`jev.schema.answer`), text fields included, so the
drafter learns from documents `render_input(row) + answer JSON` of a task's labelled rows.
"""

import json
from pathlib import Path

from jev.data.examples import row_label
from jev.schema import Task, load_task, render_input
from jev.schema.answer import answer_text


class AnswerDocuments:
    """A text source (`jev.train.corpus.TextSource`): the answered rows of JSONL files for one task."""

    def __init__(self, reference: str, paths: list[Path]) -> None:
        self.reference = reference
        self.task: Task = load_task(reference)
        self.paths = paths

    def __call__(self) -> list[str]:
        documents = []
        for path in self.paths:
            with open(path, encoding="utf-8") as rows:
                for line in rows:
                    if line.strip():
                        row = json.loads(line)
                        values = self.task.spec.values_of(row_label(row, self.task))
                        documents.append(render_input(self.task, row["input"]) + answer_text(self.task.spec, values))
        return documents

    def __repr__(self) -> str:
        return f"answers of {self.reference} in {[str(p) for p in self.paths]}"
