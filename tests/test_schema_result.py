"""Decided[T] and Usage: typed results."""

import pytest
from pydantic import ValidationError

from jev.schema import Decided, InputTooLongError, JevError, Usage
from schemas.mail import MailDecision

PROBS = {
    "kind": {"easy_ham": 0.7, "hard_ham": 0.2, "spam": 0.1},
    "mailing_list": {False: 0.4, True: 0.6},
    "reply": {False: 0.9, True: 0.1},
}


def test_decided_is_subscriptable_and_validates_value_as_the_decision_model() -> None:
    decided = Decided[MailDecision](
        value={"kind": "spam", "mailing_list": True, "reply": False, "subject": "Win"},
        probs=PROBS,
        usage=Usage(input_tokens=12, decision_passes=1),
        model={"name": "tiny"},
    )
    assert type(decided.value) is MailDecision
    assert decided.value.kind == "spam"
    assert decided.probs["mailing_list"][True] == 0.6
    assert decided.usage == Usage(input_tokens=12, decision_passes=1, queue_ms=0.0, compute_ms=0.0)


def test_decided_refuses_a_value_that_is_not_the_decision() -> None:
    with pytest.raises(ValidationError):
        Decided[MailDecision](
            value={"kind": "eggs"}, probs=PROBS, usage=Usage(input_tokens=1, decision_passes=1)
        )


def test_decided_round_trips_through_json() -> None:
    decided = Decided[MailDecision](
        value=MailDecision(kind="easy_ham", mailing_list=False, reply=True, subject="Re: lunch"),
        probs={"kind": PROBS["kind"]},
        usage=Usage(input_tokens=3, decision_passes=1, compute_ms=1.5),
    )
    again = Decided[MailDecision].model_validate_json(decided.model_dump_json())
    assert again.value == decided.value
    assert again.usage.compute_ms == 1.5


def test_usage_counts_cannot_be_negative() -> None:
    with pytest.raises(ValidationError):
        Usage(input_tokens=-1, decision_passes=1)
    with pytest.raises(ValidationError):
        Usage(input_tokens=1, decision_passes=1, generation_passes=-1)


def test_input_too_long_says_by_how_much() -> None:
    error = InputTooLongError(tokens=600, limit=512)
    assert isinstance(error, JevError)
    assert (error.tokens, error.limit) == (600, 512)
    assert "600 tokens, 88 over the limit of 512" in str(error)


@pytest.mark.slow
def test_schema_and_calibration_import_without_torch():
    """Clients and the schema layer must not need torch; `jev`'s top-level names load lazily."""
    import subprocess
    import sys

    code = "import sys, jev, jev.schema, jev.calibration; assert 'torch' not in sys.modules; jev.Decided"
    subprocess.run([sys.executable, "-c", code], check=True)
