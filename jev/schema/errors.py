"""The errors the schema layer raises, under one base so callers can catch Jev's own refusals.

Errors that concern several places at once (every unsupported field of a schema, every invalid
field of an input) carry them as `problems`: a list of `{"loc": dotted path, "msg": text}`, the
shape pydantic uses, so the server can turn them into problem details without parsing messages.
"""

from typing import TypedDict

from pydantic import ValidationError


class Problem(TypedDict):
    """One thing wrong at one place: `loc` is a dotted field path, `"$"` for the object as a whole."""

    loc: str
    msg: str


class JevError(Exception):
    """Base of every error Jev raises on purpose."""


class ProblemsError(JevError):
    """An error made of one or more located problems, listed one per line in the message."""

    def __init__(self, summary: str, problems: list[Problem], hint: str = "") -> None:
        self.summary = summary
        self.problems = problems
        self.hint = hint
        lines = [summary, *(f"  {p['loc']}: {p['msg']}" for p in problems)]
        if hint:
            lines.append(hint)
        super().__init__("\n".join(lines))


class UnsupportedSchemaError(ProblemsError):
    """A decision model uses a field type Jev cannot decide (or cannot decide yet)."""


class InvalidInputError(ProblemsError):
    """A request's input does not match the task's input model."""


class InvalidDecisionError(ProblemsError):
    """Values or a label do not fit the decision model (a bad label in data, a bad head output)."""


class SchemaMismatchError(JevError):
    """The decision schema differs from the one a checkpoint was trained on.

    `changes` are human sentences from `describe_changes`; heads trained on another layout would
    read the wrong query tokens or index the wrong values, so loading must stop here.
    """

    def __init__(self, changes: list[str], task: str = "") -> None:
        self.changes = changes
        self.task = task
        which = f"the decision schema of task {task!r}" if task else "the decision schema"
        lines = [f"{which} differs from the one the model was trained on:"]
        lines += [f"  - {change}" for change in changes]
        lines.append(
            "retrain the decision heads on this schema, or load the schema the model was trained with"
        )
        super().__init__("\n".join(lines))


class InputTooLongError(JevError):
    """An input has more tokens than the model accepts and its task does not allow truncation."""

    def __init__(self, tokens: int, limit: int) -> None:
        self.tokens = tokens
        self.limit = limit
        super().__init__(
            f"the input is {tokens} tokens, {tokens - limit} over the limit of {limit}; "
            "shorten it, or use a task defined with truncate=True"
        )


class TaskLoadError(JevError):
    """A task reference (`module.path:NAME`) does not lead to a Task."""


UNKNOWN_FIELD = "unknown field: the model does not read it; remove it, or declare it in the model"


def problems_from(error: ValidationError) -> list[Problem]:
    """Turn pydantic's errors into Jev problems, one per field path."""
    return [
        {"loc": ".".join(str(part) for part in e["loc"]) or "$",
         "msg": UNKNOWN_FIELD if e["type"] == "extra_forbidden" else e["msg"]}
        for e in error.errors()
    ]
