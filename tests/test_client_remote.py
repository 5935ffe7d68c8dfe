"""The typed client against the app: the same `Decided[Decision]` as the local runtime, clear refusals."""

from typing import Literal

import httpx
import pytest
from litestar.testing import AsyncTestClient, TestClient
from pydantic import BaseModel, Field

from jev import Decided
from jev.client import APIError, AsyncClient, AuthenticationError, Client, InvalidInputError, NotFoundError
from jev.schema import SchemaMismatchError
from jev.serve.app import create_app
from jev.serve.settings import ServeSettings
from schemas.mail import MailDecision
from tests.serving import Routing, TicketDecision, TicketInput, ticket, tiny_decider, wait_ready


@pytest.fixture(scope="module")
def decider():
    return tiny_decider()


@pytest.fixture(scope="module")
def http(decider):
    with TestClient(create_app(decider, ServeSettings(max_wait_ms=1, api_keys=("secret",)))) as client:
        wait_ready(client.get)
        yield client


@pytest.fixture
def client(http):
    return Client(str(http.base_url), api_key="secret", http_client=http)


def test_remote_decision_is_the_local_type_with_identical_probabilities(client, decider):
    data = ticket("refund please, the login is broken")
    remote = client.decide(TicketDecision, data)
    local = decider.decide(TicketDecision, data)
    assert type(remote) is type(local) is Decided[TicketDecision]
    assert isinstance(remote.value, TicketDecision) and remote.value == local.value
    assert remote.probs.keys() == local.probs.keys()
    for name, table in local.probs.items():
        assert list(remote.probs[name]) == list(table), "keys are the typed values, in the same order"
        assert remote.probs[name] == pytest.approx(table, abs=1e-6)
    assert set(remote.probs["routing.escalate"]) == {False, True} and None in remote.probs["sentiment"]
    assert remote.outcomes.keys() == local.outcomes.keys()
    timing = {"queue_ms": remote.usage.queue_ms, "compute_ms": remote.usage.compute_ms}
    assert remote.usage == local.usage.model_copy(update=timing)
    assert remote.usage.decision_passes == 1 and remote.usage.generation_passes == 0
    assert remote.model["schema_hash"] == local.model["schema_hash"]


def test_pydantic_inputs_and_batches(client, decider):
    inputs = [TicketInput.model_validate(ticket(t)) for t in ("a", "refund", "bug in login")]
    remote = client.decide_batch(TicketDecision, inputs)
    local = decider.decide_batch(TicketDecision, inputs)
    assert [r.value for r in remote] == [r.value for r in local]
    assert client.decide(MailDecision, {"body": "win a free cruise"}).value.kind in ("easy_ham", "hard_ham", "spam")


def test_schema_mismatch_names_the_changed_field(client):
    class TicketDecision(BaseModel):
        priority: Literal["low", "high", "urgent"]
        severity: int = Field(ge=1, le=4)
        tags: set[Literal["refund", "bug", "login"]]
        sentiment: Literal["pos", "neg"] | None
        routing: Routing

    with pytest.raises(SchemaMismatchError, match="priority"):
        client.decide(TicketDecision, ticket("a"))

    class Unrelated(BaseModel):
        spam: bool

    with pytest.raises(APIError, match="no task deciding Unrelated"):
        client.decide(Unrelated, {"body": "x"})
    with pytest.raises(SchemaMismatchError, match="ticket"):
        client.decide(MailDecision, {"body": "x"}, task="ticket")


def test_errors_are_typed_and_carry_the_problem(client, http):
    with pytest.raises(InvalidInputError) as error:
        client.decide(TicketDecision, {"text": 1, "customer": {}})
    assert {e["loc"] for e in error.value.errors} == {"input.text", "input.customer.name"}
    assert error.value.status == 422 and error.value.problem["title"] == "Invalid input"
    with pytest.raises(AuthenticationError):
        Client(str(http.base_url), api_key="wrong", http_client=http).tasks()
    with pytest.raises(NotFoundError):
        client.task("nope")


def test_async_client_round_trip(decider):
    import anyio

    async def main() -> None:
        app = create_app(decider, ServeSettings(max_wait_ms=1))
        async with AsyncTestClient(app) as http:
            for _ in range(200):
                if (await http.get("/health/ready")).status_code == 200:
                    break
                await anyio.sleep(0.02)
            async with AsyncClient(str(http.base_url), http_client=http) as client:
                one = await client.decide(TicketDecision, ticket("refund"))
                many = await client.decide_batch(TicketDecision, [ticket("refund"), ticket("bug")])
                assert one.value == many[0].value and isinstance(one, Decided)
                local = decider.decide(TicketDecision, ticket("refund"))
                for name, table in local.probs.items():
                    assert one.probs[name] == pytest.approx(table, abs=1e-6)

    anyio.run(main)


def test_client_never_needs_a_running_server_to_be_built():
    with Client("http://127.0.0.1:9", timeout=1, max_retries=0) as client:
        assert isinstance(client._http, httpx.Client)


def test_text_fields_travel_through_the_service_and_the_client(client, decider):
    data = {"body": "Win a free cruise now! Reply today."}
    remote = client.decide(MailDecision, data)
    local = decider.decide(MailDecision, data)
    assert isinstance(remote.value.subject, str) and remote.value == local.value
    assert remote.usage.generated_tokens == local.usage.generated_tokens > 0
    assert remote.usage.generation_passes == local.usage.generation_passes > 0
    assert remote.usage.decision_passes == local.usage.decision_passes == 1
    assert remote.model["truncated_texts"] == local.model["truncated_texts"]
