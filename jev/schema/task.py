"""A task: what goes in (input model), what comes out (decision model), and how to find it by name.

Tasks are plain module attributes referenced as `module.path:NAME` (e.g. `schemas.mail:TASK`), so
a checkpoint or a command line can name one without Jev keeping a global registry.
"""

import importlib
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from jev.schema.errors import InvalidInputError, TaskLoadError, problems_from
from jev.schema.policy import FieldPolicy
from jev.schema.spec import DecisionSpec, compile_decision

_TASK_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")


@dataclass(frozen=True)
class Task:
    """A named decision task. The decision model is compiled on creation, so a bad schema fails early.

    `truncate` says whether an input longer than the model's limit may be cut instead of refused.
    `policies` maps closed field names to their `FieldPolicy` (abstention threshold, conformal sets).
    `name` appears in URLs (`/v1/decide/{name}`), so it is lower-case letters, digits, `_` and `-`.
    """

    name: str
    input_model: type[BaseModel]
    decision_model: type[BaseModel]
    description: str = ""
    truncate: bool = False
    policies: dict[str, FieldPolicy] = field(default_factory=dict)
    spec: DecisionSpec = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not _TASK_NAME.fullmatch(self.name):
            raise ValueError(
                f"task name {self.name!r} must be lower-case letters, digits, '_' or '-', starting with a "
                "letter or digit"
            )
        if not (isinstance(self.input_model, type) and issubclass(self.input_model, BaseModel)):
            raise TypeError(
                f"task {self.name!r}: input_model must be a pydantic model class, got {self.input_model!r}"
            )
        object.__setattr__(self, "spec", compile_decision(self.decision_model))
        closed = {f.name for f in self.spec.closed_fields}
        unknown = sorted(set(self.policies) - closed)
        if unknown:
            raise ValueError(
                f"task {self.name!r}: policies name {unknown}, which are not closed fields {sorted(closed)}"
            )
        multilabel = sorted(
            name for name, policy in self.policies.items()
            if policy.conformal_coverage is not None and self.spec.field(name).kind == "multilabel"
        )
        if multilabel:
            raise ValueError(
                f"task {self.name!r}: conformal sets need a single-choice field; {multilabel} are multi-label "
                "(use abstain_below there)"
            )

    def parse_input(self, data: BaseModel | dict[str, Any]) -> BaseModel:
        """The input as an instance of `input_model`; InvalidInputError lists every bad field otherwise.

        Unknown fields are refused at every depth, whatever the model's `extra` setting: the model
        reads only declared fields, so a field it would drop must not look as if it were read.
        """
        if isinstance(data, self.input_model):
            return data
        if not isinstance(data, dict):
            raise InvalidInputError(
                f"invalid input for task {self.name!r}:",
                [
                    {
                        "loc": "$",
                        "msg": f"expected a {self.input_model.__name__} object, got {type(data).__name__}",
                    }
                ],
            )
        try:
            return self.input_model.model_validate(data, extra="forbid")
        except ValidationError as error:
            raise InvalidInputError(f"invalid input for task {self.name!r}:", problems_from(error)) from None


def load_task(reference: str) -> Task:
    """The Task at `module.path:NAME`; TaskLoadError saying which part of the reference is wrong.

    A module that cannot be found is retried once with the working directory appended to
    `sys.path` (and left there, so the module's own later imports work), so a project's own
    `my_schemas.py` works from its folder. Appended, not prepended: a folder that happens to hold
    a directory named like an installed package must not shadow it.
    """
    module_name, colon, attribute = reference.partition(":")
    if not colon or not module_name or not attribute:
        raise TaskLoadError(
            f"task reference {reference!r} must look like 'module.path:NAME', e.g. 'schemas.mail:TASK'"
        )
    module = _import(module_name, reference)
    if not hasattr(module, attribute):
        tasks = sorted(name for name, value in vars(module).items() if isinstance(value, Task))
        raise TaskLoadError(
            f"module {module_name!r} has no attribute {attribute!r}; the Tasks there are: {tasks or 'none'}"
        )
    task = getattr(module, attribute)
    if not isinstance(task, Task):
        raise TaskLoadError(f"{reference!r} is a {type(task).__name__}, not a jev Task")
    return task


def _import(module_name: str, reference: str) -> Any:
    try:
        return _import_once(module_name)
    except ModuleNotFoundError as error:
        if not _is_missing(module_name, error) or os.getcwd() in sys.path:
            raise _load_error(module_name, reference, error) from error
    sys.path.append(os.getcwd())
    importlib.invalidate_caches()
    try:
        return _import_once(module_name)
    except ModuleNotFoundError as error:
        raise _load_error(module_name, reference, error) from error


def _import_once(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError:
        raise
    except Exception as error:
        raise TaskLoadError(
            f"importing module {module_name!r} failed: {type(error).__name__}: {error}"
        ) from error


def _is_missing(module_name: str, error: ModuleNotFoundError) -> bool:
    """True when the module itself (or a parent package) is missing, not something it imports."""
    return error.name is not None and (module_name == error.name or module_name.startswith(error.name + "."))


def _load_error(module_name: str, reference: str, error: ModuleNotFoundError) -> TaskLoadError:
    if _is_missing(module_name, error):
        return TaskLoadError(
            f"module {module_name!r} of task reference {reference!r} was not found "
            f"(searched sys.path, including the working directory {os.getcwd()!r})"
        )
    return TaskLoadError(f"importing module {module_name!r} failed: {error}")
