"""Retries, Retry-After, total timeouts and typed errors, against small litestar servers that misbehave."""

import threading
import time

import anyio
import pytest
import uvicorn
from litestar import Litestar, Response, get
from litestar.testing import TestClient

from jev.client import (
    APIConnectionError,
    APITimeoutError,
    AsyncClient,
    Client,
    RateLimitError,
    ServerError,
    retry_after,
)
from tests.serving import free_port

pytestmark = pytest.mark.slow


def flaky_app(failures: list[tuple[int, dict[str, str]]]) -> tuple[Litestar, list[float]]:
    """GET /v1/tasks answers each queued (status, headers) in turn, then 200; records arrival times."""
    arrivals: list[float] = []
    queue = list(failures)

    @get("/v1/tasks", sync_to_thread=False)
    def tasks() -> Response:
        arrivals.append(time.monotonic())
        if queue:
            status, headers = queue.pop(0)
            return Response({"title": "busy", "status": status}, status_code=status, headers=headers,
                            media_type="application/problem+json")
        return Response({"tasks": []})

    return Litestar([tasks]), arrivals


def test_429_then_200_waits_as_long_as_retry_after_says():
    app, arrivals = flaky_app([(429, {"Retry-After": "1"})])
    with TestClient(app) as http:
        client = Client(str(http.base_url), http_client=http, max_retries=2)
        assert client.tasks() == []
    assert len(arrivals) == 2 and arrivals[1] - arrivals[0] >= 0.95


def test_5xx_retried_with_backoff_then_raised_typed():
    app, arrivals = flaky_app([(503, {}), (503, {}), (503, {})])
    with TestClient(app) as http:
        client = Client(str(http.base_url), http_client=http, max_retries=2)
        with pytest.raises(ServerError) as error:
            client.tasks()
    assert error.value.status == 503 and error.value.problem["title"] == "busy"
    assert len(arrivals) == 3
    assert arrivals[1] - arrivals[0] >= 0.3 and arrivals[2] - arrivals[1] >= 0.7, "0.5 s then 1 s, jittered -25%"


def test_no_retries_when_disabled_and_4xx_never_retried():
    app, arrivals = flaky_app([(429, {"Retry-After": "0"})])
    with TestClient(app) as http, pytest.raises(RateLimitError):
        Client(str(http.base_url), http_client=http, max_retries=0).tasks()
    assert len(arrivals) == 1


def test_timeout_is_total_across_retries():
    app, arrivals = flaky_app([(503, {"Retry-After": "5"})] * 3)
    with TestClient(app) as http:
        client = Client(str(http.base_url), http_client=http, timeout=1.0, max_retries=3)
        start = time.monotonic()
        with pytest.raises(ServerError):
            client.tasks()
    assert time.monotonic() - start < 1.0 and len(arrivals) == 1, "a wait past the deadline is not started"


def test_connection_errors_are_retried_then_raised():
    start = time.monotonic()
    with Client("http://127.0.0.1:9", timeout=10, max_retries=1) as client, pytest.raises(APIConnectionError):
        client.tasks()
    assert time.monotonic() - start >= 0.3


@pytest.fixture
def slow_server():
    """A real loopback server (the test client ignores socket timeouts) whose /v1/tasks takes 1.2 s."""
    @get("/v1/tasks")
    async def slow() -> dict:
        await anyio.sleep(1.2)
        return {"tasks": []}

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(Litestar([slow]), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def test_slow_server_hits_the_total_timeout(slow_server):
    with Client(slow_server, timeout=0.5, max_retries=2) as client:
        start = time.monotonic()
        with pytest.raises(APITimeoutError):
            client.tasks()
        assert time.monotonic() - start < 1.0


def test_async_timeout_is_exact(slow_server):
    async def call() -> None:
        async with AsyncClient(slow_server, timeout=0.5, max_retries=2) as client:
            await client.tasks()

    start = time.monotonic()
    with pytest.raises(APITimeoutError):
        anyio.run(call)
    assert time.monotonic() - start < 1.0


def test_retry_after_parses_seconds_and_dates():
    import httpx

    assert retry_after(httpx.Response(429, headers={"Retry-After": "2"})) == 2
    assert retry_after(httpx.Response(429, headers={"Retry-After": "9999"})) == 60
    assert retry_after(httpx.Response(429, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0
    assert retry_after(httpx.Response(429)) is None
