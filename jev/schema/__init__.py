"""Decision schemas: pydantic models compiled into the fields Jev decides, tasks, and typed results.

This package imports pydantic only (no torch, no numpy), so clients and servers can use it alone.
"""

from jev.schema.changes import describe_changes
from jev.schema.errors import (
    InputTooLongError,
    InvalidDecisionError,
    InvalidInputError,
    JevError,
    Problem,
    ProblemsError,
    SchemaMismatchError,
    TaskLoadError,
    UnsupportedSchemaError,
)
from jev.schema.fields import MAX_INT_VALUES, SUPPORTED_TYPES, FieldKind, FieldSpec, MaxTokens
from jev.schema.policy import FieldOutcome, FieldPolicy
from jev.schema.render import render_input, render_values
from jev.schema.result import Decided, DecisionSource, Usage
from jev.schema.spec import DecisionSpec, check_layout, compile_decision, layout_hash
from jev.schema.task import Task, load_task

__all__ = [
    "MAX_INT_VALUES",
    "SUPPORTED_TYPES",
    "Decided",
    "DecisionSource",
    "DecisionSpec",
    "FieldKind",
    "FieldOutcome",
    "FieldPolicy",
    "FieldSpec",
    "InputTooLongError",
    "InvalidDecisionError",
    "InvalidInputError",
    "JevError",
    "MaxTokens",
    "Problem",
    "ProblemsError",
    "SchemaMismatchError",
    "Task",
    "TaskLoadError",
    "UnsupportedSchemaError",
    "Usage",
    "check_layout",
    "compile_decision",
    "describe_changes",
    "layout_hash",
    "load_task",
    "render_input",
    "render_values",
]
