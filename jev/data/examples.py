"""Labelled decision data: JSONL rows `{"input": {...}, "label": {...}}` validated against a task.

Every row goes through the same validation, rendering and tokenisation as a served request
(`Decider.encode`), so training sees exactly what serving will. Bad rows are reported with their
line numbers; they fail the run unless the caller chose to skip them.

A text field's target is `label[name]`, or the row's own top-level `name` when the label lacks it
(the mail data keeps the real subject line beside the label); a null or missing one is "".
"""

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from jev.schema import JevError, ProblemsError, Task

MAX_REPORTED = 20
ROW_FORMAT = """data files are JSONL, one row per line:
  {"input": {...the task's input fields...}, "label": {...its decision fields...}}
e.g. for schemas.mail:TASK
  {"input": {"body": "Win a free cruise!"}, "label": {"kind": "spam", "mailing_list": false,
   "reply": false, "subject": "Free cruise"}}
A text field's target may also sit beside the label ("subject": "..." at the top of the row);
other top-level keys (an id, a source) are ignored. Invalid rows are listed with their line numbers."""


class InvalidRowsError(JevError):
    """Rows of a data file that do not fit the task, one `file:line: where: what` line each."""

    def __init__(self, path: Path, lines: list[str]) -> None:
        shown = lines[:MAX_REPORTED]
        more = f"\n... and {len(lines) - MAX_REPORTED} more" if len(lines) > MAX_REPORTED else ""
        super().__init__(
            f"{len(lines)} invalid rows in {path} (pass --skip-invalid to drop them):\n" + "\n".join(shown) + more
        )
        self.lines = lines


@dataclass(frozen=True)
class Example:
    """One training row: its token ids, the index (or 0/1 per label) of each closed field's answer, the
    answer written as tokens (empty unless the run trains the language model on it), and the states
    `[len(token_ids) + len(answer_ids), D]` entering the query layer when a run caches them."""

    token_ids: list[int]
    label: dict[str, int | list[int]]
    answer_ids: list[int] = field(default_factory=list)
    lower_states: "torch.Tensor | None" = None


def read_examples(
    path: Path,
    task: Task,
    encode: Callable[[Task, dict], list[int]],
    skip_invalid: bool = False,
    answer: Callable[[Mapping[str, object]], list[int]] | None = None,
) -> tuple[list[Example], list[str]]:
    """All valid rows of `path`, and a description of each invalid row that was skipped.

    `answer`, when given, turns a row's field values (dotted names) into its answer tokens.
    """
    examples, problems = [], []
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                examples.append(_example(json.loads(line), task, encode, answer))
            except json.JSONDecodeError as exc:
                problems.append(f"{path}:{number}: not JSON: {exc.msg}")
            except ProblemsError as exc:
                where = "; ".join(f"{p['loc']}: {p['msg']}" for p in exc.problems)
                problems.append(f"{path}:{number}: {where}")
            except (JevError, ValueError, TypeError) as exc:
                problems.append(f"{path}:{number}: {exc}")
    if problems and not skip_invalid:
        raise InvalidRowsError(path, problems)
    if not examples:
        raise JevError(f"{path} has no valid rows for task {task.name!r}")
    return examples, problems


def row_label(row: dict, task: Task) -> object:
    """The row's label with each text field filled in from the row itself when the label lacks it."""
    label = row["label"]
    if isinstance(label, dict):
        label = dict(label)
        for spec in task.spec.text_fields:
            key = spec.input_keys[0]
            if key not in label:
                label[key] = row.get(key) or ""
    return label


def _example(
    row: object,
    task: Task,
    encode: Callable[[Task, dict], list[int]],
    answer: Callable[[Mapping[str, object]], list[int]] | None,
) -> Example:
    if not isinstance(row, dict) or "input" not in row or "label" not in row:
        raise ValueError('a row is an object with "input" and "label" keys')
    label = row_label(row, task)
    targets = task.spec.encode_label(label)
    return Example(encode(task, row["input"]), targets, answer(task.spec.values_of(label)) if answer else [])
