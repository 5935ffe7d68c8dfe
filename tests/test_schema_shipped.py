"""The shipped task schemas: exact value lists (the data's README is the reference) and the example."""

import pytest

from jev.schema import InvalidInputError
from schemas.chat import TASK as CHAT
from schemas.examples import TASK as TICKET
from schemas.examples import Priority, TicketDecision
from schemas.mail import TASK as MAIL

LANGUAGES = [
    "bengali",
    "chinese",
    "dutch",
    "english",
    "french",
    "german",
    "hebrew",
    "hindi",
    "indonesian",
    "italian",
    "japanese",
    "korean",
    "marathi",
    "oriya",
    "persian",
    "portuguese",
    "russian",
    "spanish",
    "swedish",
    "tamil",
    "traditionalchinese",
    "turkish",
    "ukrainian",
    "yoruba",
]
TOPICS = [
    "ai",
    "botprofile",
    "coding",
    "compliment",
    "computers",
    "conversations",
    "emotion",
    "food",
    "gossip",
    "greetings",
    "health",
    "history",
    "humor",
    "literature",
    "money",
    "movies",
    "politics",
    "proverbs",
    "psychology",
    "science",
    "sports",
    "trivia",
]


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


def test_chat_task_has_the_24_languages_and_22_topics_in_order() -> None:
    assert CHAT.name == "chat"
    assert len(LANGUAGES) == 24 and len(TOPICS) == 22
    assert CHAT.spec.field("language").values == tuple(LANGUAGES)
    assert CHAT.spec.field("topic").values == tuple(TOPICS)
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
