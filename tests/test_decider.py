"""`Decider`: typed results, probabilities, batching, limits and checkpoint refusals."""

import json
from enum import Enum
from typing import Literal

import pytest
import torch
from pydantic import BaseModel, Field

from jev import Decided, Decider
from jev.decide.decider import NOTHING_TO_READ, UnknownTaskError
from jev.model import CheckpointError
from jev.schema import (
    InputTooLongError,
    InvalidInputError,
    SchemaMismatchError,
    Task,
    render_input,
)
from jev.schema.errors import UNKNOWN_FIELD
from schemas.mail import TASK as MAIL_TASK
from schemas.mail import MailDecision
from tests.tiny import random_model, tiny_config, tiny_tokenizer


class Priority(Enum):
    LOW = "low"
    HIGH = "high"


class Routing(BaseModel):
    team: Literal["billing", "tech"]
    escalate: bool


class TicketInput(BaseModel):
    text: str


class TicketDecision(BaseModel):
    priority: Priority
    severity: int = Field(ge=1, le=4)
    tags: set[Literal["refund", "bug", "login"]]
    sentiment: Literal["pos", "neg"] | None
    routing: Routing


TICKET = Task(name="ticket", input_model=TicketInput, decision_model=TicketDecision, truncate=True)
STRICT = Task(name="strict", input_model=TicketInput, decision_model=Routing)
UNTRAINED = Task(name="untrained", input_model=TicketInput, decision_model=Routing)


@pytest.fixture(scope="module")
def decider() -> Decider:
    model = random_model(tiny_config(index_topk=6, vocab_size=400, max_position_embeddings=128))
    tasks = {"tests.test_decider:TICKET": TICKET, "tests.test_decider:STRICT": STRICT, "schemas.mail:TASK": MAIL_TASK}
    made = Decider.new(model, tiny_tokenizer(), tasks, max_input_tokens=24, max_batch=4)
    torch.manual_seed(0)
    with torch.no_grad():
        for heads in made.decision_model.heads.values():
            for param in heads.parameters():
                param.normal_(std=1.0)
    return made


def test_result_is_the_users_model_with_every_value_probability(decider):
    result = decider.decide(TicketDecision, {"text": "refund please, login broken"})
    assert isinstance(result, Decided) and isinstance(result.value, TicketDecision)
    assert set(result.probs) == {"priority", "severity", "tags", "sentiment", "routing.team", "routing.escalate"}
    assert list(result.probs["severity"]) == [1, 2, 3, 4]
    assert list(result.probs["sentiment"]) == ["pos", "neg", None]
    for name in ("priority", "severity", "sentiment", "routing.team", "routing.escalate"):
        assert sum(result.probs[name].values()) == pytest.approx(1.0, abs=1e-5)
    assert result.usage.decision_passes == 1 and result.usage.generation_passes == 0 and result.usage.input_tokens > 1


def test_value_agrees_with_probabilities(decider):
    for text in ["refund", "the app crashes on login", "thanks a lot", "x" * 40]:
        result = decider.decide("ticket", {"text": text})
        for name in ("priority", "severity", "sentiment"):
            table = result.probs[name]
            best = max(table, key=table.__getitem__)
            chosen = getattr(result.value, name)
            assert (chosen.value if isinstance(chosen, Enum) else chosen) == best
        assert result.value.routing.team == max(result.probs["routing.team"], key=result.probs["routing.team"].get)
        assert result.value.tags == {label for label, p in result.probs["tags"].items() if p >= 0.5}


def test_batch_results_equal_one_by_one_results(decider):
    inputs = [{"text": t} for t in ["a", "refund now please", "login bug in the billing page", "ok", "x y z w"]]
    batched = decider.decide_batch(TicketDecision, inputs)
    for data, result in zip(inputs, batched, strict=True):
        alone = decider.decide(TicketDecision, data)
        assert alone.value == result.value
        for name, table in alone.probs.items():
            for value, p in table.items():
                assert result.probs[name][value] == pytest.approx(p, abs=1e-5)


def test_decide_batch_uses_ceil_n_over_max_batch_passes(decider, monkeypatch):
    calls = []
    original = decider.decision_model.forward
    monkeypatch.setattr(decider.decision_model, "forward", lambda *a, **k: calls.append(1) or original(*a, **k))
    decider.decide_batch("ticket", [{"text": str(i)} for i in range(9)])
    assert len(calls) == 3


def test_input_errors_are_clear(decider):
    with pytest.raises(InvalidInputError) as error:
        decider.decide("ticket", {"txt": "typo"})
    assert {p["loc"]: p["msg"] for p in error.value.problems} == {"text": "Field required", "txt": UNKNOWN_FIELD}
    with pytest.raises(InputTooLongError, match="over the limit of 24"):
        decider.decide(Routing, {"text": "refund " * 60})
    long_text = "refund " * 30 + "login " * 30
    result = decider.decide("ticket", {"text": long_text})
    assert result.model["truncated_input"] is True and result.usage.input_tokens == 24
    kept = decider.encode(TICKET, {"text": long_text}).token_ids
    rendered = decider.tokenizer.encode(render_input(TICKET, {"text": long_text})).ids
    full = [decider.tokenizer.token_to_id("<bos>"), *rendered]
    assert len(full) > 24
    assert kept == full[:18] + full[-6:], "keeps the head (3/4 of the limit) and the tail (1/4)"


def test_unknown_decisions_are_refused(decider):
    class Other(BaseModel):
        spam: bool

    with pytest.raises(UnknownTaskError, match="no task decides Other"):
        decider.decide(Other, {"text": "x"})
    with pytest.raises(UnknownTaskError, match="no task 'nope'"):
        decider.decide("nope", {"text": "x"})


def test_saved_decider_loads_with_identical_answers(decider, tmp_path):
    decider.save(tmp_path)
    loaded = Decider.load(tmp_path, tasks=[TICKET, STRICT])
    data = {"text": "login bug, refund"}
    assert loaded.decide(TicketDecision, data).probs == decider.decide(TicketDecision, data).probs
    mail = loaded.decide(MailDecision, {"body": "Win a free cruise"})
    assert isinstance(mail.value, MailDecision)


def test_a_task_the_model_never_learned_is_refused_at_load_with_the_command_that_trains_it(decider, tmp_path):
    decider.save(tmp_path)
    with pytest.raises(UnknownTaskError) as error:
        Decider.load(tmp_path, tasks=[TICKET, UNTRAINED])
    message = str(error.value)
    assert "'untrained'" in message and "['mail', 'strict', 'ticket']" in message
    reference = f"{TicketInput.__module__}:UNTRAINED"  # pytest may import this file as `test_decider`
    assert f"jev train decide --base {tmp_path} --task {reference} --data " in message
    assert '{"input": {...}, "label": {...}}' in message


def test_changed_schema_is_refused_naming_the_field(decider, tmp_path):
    decider.save(tmp_path)

    class Routing2(BaseModel):
        team: Literal["billing", "tech", "sales"]
        escalate: bool

    changed = Task(name="strict", input_model=TicketInput, decision_model=Routing2)
    with pytest.raises(SchemaMismatchError, match="team"):
        Decider.load(tmp_path, tasks=[TICKET, changed])


def test_corrupted_checkpoints_fail_clearly(decider, tmp_path):
    decider.save(tmp_path)
    (tmp_path / "heads.safetensors").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match=r"heads\.safetensors"):
        Decider.load(tmp_path, tasks=[TICKET, STRICT])
    decider.save(tmp_path)
    manifest = json.loads((tmp_path / "jev.json").read_text())
    del manifest["tasks"]
    (tmp_path / "jev.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="corrupt"):
        Decider.load(tmp_path)
    (tmp_path / "jev.json").unlink()
    with pytest.raises(CheckpointError, match="not a Jev decider"):
        Decider.load(tmp_path)


def test_unknown_fields_are_refused_not_dropped(decider):
    with pytest.raises(InvalidInputError) as error:
        decider.decide("ticket", {"text": "refund please", "subject": "the model never reads this"})
    assert error.value.problems == [{"loc": "subject", "msg": UNKNOWN_FIELD}]


@pytest.mark.parametrize("text", ["", "   ", "\n\t \n"])
def test_an_input_with_nothing_to_read_is_refused(decider, text):
    with pytest.raises(InvalidInputError) as error:
        decider.decide("ticket", {"text": text})
    assert error.value.problems == [{"loc": "$", "msg": NOTHING_TO_READ}]
    assert decider.decide("ticket", {"text": " x "}).usage.input_tokens > 1
