"""A real `jev serve` process on loopback: the CLI, env settings, the typed client, graceful shutdown."""

import asyncio
import signal

import httpx
import pytest

from jev.client import AsyncClient, AuthenticationError, Client
from jev.decide.decider import Decider
from tests.serving import TicketDecision, server_process, ticket, tiny_decider


@pytest.fixture(scope="module")
def decider():
    return tiny_decider()


@pytest.fixture(scope="module")
def model_dir(decider, tmp_path_factory):
    folder = tmp_path_factory.mktemp("decider")
    decider.save(folder)
    return folder


@pytest.mark.slow
def test_cli_server_with_env_settings_answers_the_typed_client_in_order(model_dir):
    texts = [f"ticket {i}: refund and login" for i in range(16)]
    served = Decider.load(model_dir, weights="auto")  # what `jev serve` loads by default
    expected = [served.decide(TicketDecision, ticket(t)) for t in texts]

    async def many(base: str):
        async with AsyncClient(base, api_key="beta") as client:
            return await asyncio.gather(*[client.decide(TicketDecision, ticket(t)) for t in texts])

    env = {"JEV_API_KEY": "alpha,beta", "JEV_MAX_WAIT_MS": "20"}
    with server_process(model_dir, "--max-batch", "8", env=env) as (base, _):
        assert httpx.get(f"{base}/health/ready").status_code == 200
        with Client(base) as anonymous, pytest.raises(AuthenticationError):
            anonymous.tasks()
        with Client(base, api_key="alpha") as client:
            assert {t["name"] for t in client.tasks()} == {"ticket", "strict", "mail"}
            one = client.decide(TicketDecision, ticket(texts[0]))
            assert type(one) is type(expected[0]) and isinstance(one.value, TicketDecision)
            assert one.model["model_id"] == served.model_id == client.model()["model_id"]
        answers = asyncio.run(many(base))
        for remote, local in zip(answers, expected, strict=True):
            assert remote.value == local.value
            for name, table in local.probs.items():
                assert remote.probs[name] == pytest.approx(table, abs=1e-5)
        metrics = httpx.get(f"{base}/metrics", headers={"X-API-Key": "alpha"}).text
        passes = [line for line in metrics.splitlines() if line.startswith('jev_batch_size_count{task="ticket"}')]
        assert float(passes[0].split()[-1]) < 17, "concurrent requests shared passes"


@pytest.mark.slow
def test_sigterm_lets_requests_in_flight_finish(model_dir):
    inputs = [ticket(f"refund number {i}") for i in range(8)]

    async def burst(base: str, process) -> list[int]:
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            calls = [asyncio.create_task(http.post("/v1/decide/ticket/batch", json={"inputs": inputs}))
                     for _ in range(4)]
            await asyncio.sleep(0.2)
            process.send_signal(signal.SIGTERM)
            done = await asyncio.gather(*calls, return_exceptions=True)
        return [r.status_code if isinstance(r, httpx.Response) else type(r).__name__ for r in done]

    with server_process(model_dir, "--max-batch", "2", "--max-wait-ms", "0") as (base, process):
        statuses = asyncio.run(burst(base, process))
        assert process.wait(30) in (0, -signal.SIGTERM), "uvicorn re-raises the signal after a clean shutdown"
    assert statuses == [200] * 4, statuses
