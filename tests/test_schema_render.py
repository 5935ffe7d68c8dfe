"""render_input: one deterministic template from input model to text."""

from enum import Enum

from pydantic import BaseModel

from jev.schema import Task, render_input
from schemas.mail import TASK as MAIL


class Channel(Enum):
    MAIL = "mail"
    PHONE = "phone"


class Sender(BaseModel):
    name: str
    vip: bool


class Message(BaseModel):
    text: str


class Ticket(BaseModel):
    subject: str
    sender: Sender
    channel: Channel
    tags: list[str]
    labels: set[str]
    note: str | None
    count: int
    extra: dict[str, int]
    thread: list[Message]


class Verdict(BaseModel):
    ok: bool


TASK = Task(name="ticket", input_model=Ticket, decision_model=Verdict)

TICKET = {
    "subject": "Refund\nplease",
    "sender": {"name": "Ann", "vip": True},
    "channel": "phone",
    "tags": ["b", "a"],
    "labels": {"z", "y", "x"},
    "note": None,
    "count": 3,
    "extra": {"b": 2, "a": 1},
    "thread": [{"text": "hi"}, {"text": "again"}],
}


def test_template_renders_every_field_in_declaration_order() -> None:
    assert render_input(TASK, TICKET) == (
        "subject: Refund\nplease\n"
        "sender.name: Ann\n"
        "sender.vip: true\n"
        "channel: phone\n"
        "tags: b, a\n"
        "labels: x, y, z\n"
        "note: \n"
        "count: 3\n"
        'extra: {"a": 1, "b": 2}\n'
        "thread.0.text: hi\n"
        "thread.1.text: again\n"
    )


def test_same_input_gives_same_text_from_dict_or_instance() -> None:
    instance = Ticket.model_validate(TICKET)
    assert render_input(TASK, TICKET) == render_input(TASK, instance) == render_input(TASK, dict(TICKET))


def test_mail_body_renders_as_one_field() -> None:
    assert render_input(MAIL, {"body": "Win money now"}) == "body: Win money now\n"
