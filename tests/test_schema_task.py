"""Task: creation checks, parse_input, and load_task's errors."""

import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel

from jev.schema import InvalidInputError, Task, TaskLoadError, UnsupportedSchemaError, load_task
from schemas.mail import TASK as MAIL


class Address(BaseModel):
    city: str
    zip: int


class Order(BaseModel):
    item: str
    count: int
    address: Address


class Verdict(BaseModel):
    ok: bool


ORDER_TASK = Task(name="order", input_model=Order, decision_model=Verdict)


def test_spec_is_compiled_once_on_creation() -> None:
    assert ORDER_TASK.spec is ORDER_TASK.spec
    assert [f.name for f in ORDER_TASK.spec.fields] == ["ok"]


def test_a_task_with_an_unsupported_decision_fails_on_creation() -> None:
    class Bad(BaseModel):
        score: float

    with pytest.raises(UnsupportedSchemaError, match="score"):
        Task(name="bad", input_model=Order, decision_model=Bad)


@pytest.mark.parametrize("name", ["", "Mail", "mail task", "-mail", "mail/1"])
def test_task_names_must_fit_in_a_url(name: str) -> None:
    with pytest.raises(ValueError, match="task name"):
        Task(name=name, input_model=Order, decision_model=Verdict)


def test_input_model_must_be_a_pydantic_model() -> None:
    with pytest.raises(TypeError, match="input_model"):
        Task(name="x", input_model=dict, decision_model=Verdict)  # type: ignore[arg-type]


def test_parse_input_from_dict_and_from_instance() -> None:
    data = {"item": "pen", "count": 2, "address": {"city": "Lyon", "zip": 69001}}
    parsed = ORDER_TASK.parse_input(data)
    assert type(parsed) is Order
    assert parsed.address.city == "Lyon"
    assert ORDER_TASK.parse_input(parsed) is parsed


def test_invalid_dict_lists_every_field_path() -> None:
    with pytest.raises(InvalidInputError) as caught:
        ORDER_TASK.parse_input({"count": "many", "address": {"city": "Lyon", "zip": "x"}})
    locs = [p["loc"] for p in caught.value.problems]
    assert locs == ["item", "count", "address.zip"]
    assert all(p["msg"] for p in caught.value.problems)
    assert "address.zip" in str(caught.value)


def test_wrong_type_is_refused_as_a_whole() -> None:
    with pytest.raises(InvalidInputError) as caught:
        MAIL.parse_input(["not", "a", "mail"])  # type: ignore[arg-type]
    assert caught.value.problems == [{"loc": "$", "msg": "expected a MailInput object, got list"}]


def test_instance_of_another_model_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="expected a Order object, got Verdict"):
        ORDER_TASK.parse_input(Verdict(ok=True))  # type: ignore[arg-type]


def test_load_task_finds_a_shipped_task() -> None:
    assert load_task("schemas.mail:TASK") is MAIL


@pytest.mark.parametrize(
    ("reference", "fragment"),
    [
        ("schemas.mail", "must look like 'module.path:NAME'"),
        ("schemas.mail:", "must look like"),
        (":TASK", "must look like"),
        ("schemas.nowhere_to_be_found:TASK", "module 'schemas.nowhere_to_be_found' of task reference"),
        ("no_such_package_jev:TASK", "was not found"),
        ("schemas.mail:TAKS", "has no attribute 'TAKS'; the Tasks there are: ['TASK']"),
        ("schemas.mail:MailInput", "is a ModelMetaclass, not a jev Task"),
    ],
)
def test_load_task_explains_a_bad_reference(reference: str, fragment: str) -> None:
    with pytest.raises(TaskLoadError) as caught:
        load_task(reference)
    assert fragment in str(caught.value)


@pytest.fixture(autouse=True)
def restore_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """load_task may append the working directory to sys.path; keep that out of other tests."""
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.fixture
def in_tmp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    yield tmp_path
    for name in ("my_jev_tasks", "broken_jev_tasks", "raising_jev_tasks"):
        sys.modules.pop(name, None)


def test_load_task_retries_with_the_working_directory_on_sys_path(in_tmp_dir: Path) -> None:
    (in_tmp_dir / "my_jev_tasks.py").write_text(
        textwrap.dedent(
            """
            from pydantic import BaseModel
            from jev.schema import Task

            class In(BaseModel):
                text: str

            class Out(BaseModel):
                yes: bool

            TASK = Task(name="local", input_model=In, decision_model=Out)
            """
        )
    )
    assert load_task("my_jev_tasks:TASK").name == "local"
    assert sys.path[-1] == os.getcwd()


def test_load_task_reports_a_module_that_fails_to_import(in_tmp_dir: Path) -> None:
    (in_tmp_dir / "broken_jev_tasks.py").write_text("import jev_dependency_that_is_missing\n")
    with pytest.raises(TaskLoadError, match="importing module 'broken_jev_tasks' failed: No module named"):
        load_task("broken_jev_tasks:TASK")
    (in_tmp_dir / "raising_jev_tasks.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(TaskLoadError, match="RuntimeError: boom"):
        load_task("raising_jev_tasks:TASK")


def test_task_fields_are_as_declared() -> None:
    task = Task(name="t", input_model=Order, decision_model=Verdict, description="d", truncate=True)
    assert (task.name, task.description, task.truncate) == ("t", "d", True)
    assert Task(name="t", input_model=Order, decision_model=Verdict).truncate is False


def test_mail_task_decides_closed_fields_and_writes_a_subject() -> None:
    assert [f.name for f in MAIL.spec.closed_fields] == ["kind", "mailing_list", "reply"]
    assert [f.name for f in MAIL.spec.text_fields] == ["subject"]
    assert MAIL.decision_model.model_fields["kind"].annotation == Literal["easy_ham", "hard_ham", "spam"]


def test_policies_must_name_closed_fields_and_conformal_needs_a_single_choice_field():
    from typing import Literal

    from pydantic import BaseModel

    from jev.schema import FieldPolicy

    class In(BaseModel):
        text: str

    class Out(BaseModel):
        tags: set[Literal["a", "b"]]
        team: Literal["x", "y"]

    Task(name="ok", input_model=In, decision_model=Out, policies={"team": FieldPolicy(conformal_coverage=0.9)})
    with pytest.raises(ValueError, match="not closed fields"):
        Task(name="bad", input_model=In, decision_model=Out, policies={"nope": FieldPolicy(abstain_below=0.5)})
    with pytest.raises(ValueError, match=r"\['tags'\] are multi-label"):
        Task(name="bad", input_model=In, decision_model=Out, policies={"tags": FieldPolicy(conformal_coverage=0.9)})
