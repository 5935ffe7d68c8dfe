"""The shipped task schemas: the values the shipped model was trained on, and the example."""

import json
from pathlib import Path

import pytest

from jev.schema import InvalidInputError
from schemas.chat import TASK as CHAT
from schemas.examples import TASK as TICKET
from schemas.examples import Priority, TicketDecision
from schemas.mail import TASK as MAIL

ROOT = Path(__file__).resolve().parent.parent


def trained_values(task: str) -> dict[str, list]:
    """Each closed field's values as the shipped model's heads were trained on them (its jev.json)."""
    layout = json.loads((ROOT / "models" / "default" / "jev.json").read_text())["tasks"][task]["layout"]
    return {field["name"]: field["values"] for field in layout["fields"] if field["kind"] != "text"}


def test_mail_task() -> None:
    assert MAIL.name == "mail"
    assert [(f.name, f.kind, f.values) for f in MAIL.spec.fields] == [
        ("kind", "categorical", ("easy_ham", "hard_ham", "spam")),
        ("mailing_list", "bool", (False, True)),
        ("reply", "bool", (False, True)),
        ("subject", "text", ()),
    ]
    assert MAIL.spec.field("subject").max_tokens == 32
    assert list(MAIL.input_model.model_fields) == ["body"]


def test_chat_task_has_the_24_languages_and_22_topics_the_shipped_heads_were_trained_on() -> None:
    """The data README counts 24 languages and 22 topics; the order is the trained heads' own."""
    assert CHAT.name == "chat"
    trained = trained_values("chat")
    assert (len(trained["language"]), len(trained["topic"])) == (24, 22)
    assert CHAT.spec.field("language").values == tuple(trained["language"]) == tuple(sorted(trained["language"]))
    assert CHAT.spec.field("topic").values == tuple(trained["topic"]) == tuple(sorted(trained["topic"]))
    assert list(CHAT.input_model.model_fields) == ["message"]


def test_example_task_uses_every_field_kind() -> None:
    assert [(f.name, f.kind, f.nullable) for f in TICKET.spec.fields] == [
        ("priority", "categorical", False),
        ("team", "categorical", True),
        ("severity", "int", False),
        ("products", "multilabel", False),
        ("customer.plan", "categorical", False),
        ("customer.churn_risk", "bool", False),
        ("summary", "text", False),
    ]
    decision = TICKET.spec.build(
        {
            "priority": "urgent",
            "team": None,
            "severity": 5,
            "products": ["api"],
            "customer.plan": "pro",
            "customer.churn_risk": True,
            "summary": "API down",
        }
    )
    assert isinstance(decision, TicketDecision)
    assert decision.priority is Priority.URGENT


def test_shipped_inputs_refuse_empty_text():
    """Each text a shipped task reads is declared non-empty, so no surface answers an empty mail."""
    for task in (MAIL, CHAT, TICKET):
        texts = [name for name, info in task.input_model.model_fields.items() if info.annotation is str]
        assert texts, task.name
        for name in texts:
            filled = {other: "some text" for other in texts}
            with pytest.raises(InvalidInputError) as error:
                task.parse_input({**filled, name: ""})
            assert [p["loc"] for p in error.value.problems] == [name]
