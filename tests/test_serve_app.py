"""The service through litestar's test client: every endpoint, every refusal, batching equalities."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from litestar.testing import TestClient

from jev.serve.app import create_app
from jev.serve.settings import ServeSettings
from tests.serving import MAX_INPUT_TOKENS, STRICT, TICKET, GatedEngine, ticket, tiny_decider, wait_ready

PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def decider():
    return tiny_decider()


@pytest.fixture
def make_client(decider):
    """Build an app with settings and enter its test client; every client is closed at the end."""
    opened = []

    def make(**settings) -> tuple[TestClient, GatedEngine]:
        engine = GatedEngine(decider)
        client = TestClient(create_app(engine, ServeSettings(**settings)))
        client.__enter__()
        opened.append(client)
        wait_ready(client.get)
        engine.entered.clear()
        return client, engine

    yield make
    for client in opened:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client):
    return make_client(max_wait_ms=2)[0]


def assert_problem(response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["status"] == status and body["title"]
    return body


def test_decide_returns_value_probabilities_outcomes_usage_and_ids(client):
    response = client.post("/v1/decide/ticket", json={"input": ticket("refund please")})
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"value", "probs", "outcomes", "usage", "model"}
    assert body["value"]["priority"] in ("low", "high") and body["value"]["routing"]["team"] in ("billing", "tech")
    assert list(body["probs"]["severity"]) == ["1", "2", "3", "4"]
    assert list(body["probs"]["sentiment"]) == ["pos", "neg", "null"]
    assert list(body["probs"]["routing.escalate"]) == ["false", "true"]
    assert sum(body["probs"]["priority"].values()) == pytest.approx(1, abs=1e-5)
    assert set(body["outcomes"]) == set(body["probs"]) and body["outcomes"]["priority"]["abstained"] is False
    usage = body["usage"]
    assert usage["decision_passes"] == 1 and usage["generation_passes"] == 0 and usage["input_tokens"] > 1
    assert usage["queue_ms"] >= 0 and usage["compute_ms"] > 0
    model = body["model"]
    assert model["task"] == "ticket" and model["schema_hash"] == TICKET.spec.hash
    assert model["model_id"] and model["calibrated"] is False and model["calibrator_id"] is None


def test_batch_answers_equal_single_answers(client):
    inputs = [ticket(t) for t in ("refund", "login bug on the billing page", "thanks", "x y z")]
    batch = client.post("/v1/decide/ticket/batch", json={"inputs": inputs})
    assert batch.status_code == 200
    results = batch.json()["results"]
    assert len(results) == len(inputs)
    for data, together in zip(inputs, results, strict=True):
        alone = client.post("/v1/decide/ticket", json={"input": data}).json()
        assert alone["value"] == together["value"]
        for name, table in alone["probs"].items():
            assert together["probs"][name] == pytest.approx(table, abs=1e-5)


def test_concurrent_requests_are_batched_and_keep_their_answers(make_client, decider):
    client, engine = make_client(max_batch=8, max_wait_ms=50)
    texts = [f"message number {i} about a refund" for i in range(16)]
    expected = [decider.decide("ticket", ticket(t)).probs for t in texts]
    engine.sizes.clear()
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda t: client.post("/v1/decide/ticket", json={"input": ticket(t)}), texts))
    for answer, probs in zip(answers, expected, strict=True):
        assert answer.status_code == 200
        assert answer.json()["probs"]["priority"] == pytest.approx({k: v for k, v in probs["priority"].items()})
    assert max(engine.sizes) > 1, f"requests ran one by one: {engine.sizes}"


def test_one_bad_input_never_fails_its_neighbours(make_client):
    client, _ = make_client(max_batch=8, max_wait_ms=50)
    bodies = [{"input": ticket("good")}, {"input": {"text": 3}}, {"input": {"text": "long " * 80}}] * 4
    paths = ["/v1/decide/ticket", "/v1/decide/ticket", "/v1/decide/strict"] * 4
    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda pb: client.post(pb[0], json=pb[1]), zip(paths, bodies, strict=True)))
    assert [a.status_code for a in answers] == [200, 422, 422] * 4


def test_task_list_and_detail(client):
    tasks = client.get("/v1/tasks").json()["tasks"]
    assert {t["name"]: t["schema_hash"] for t in tasks} == {
        "ticket": TICKET.spec.hash, "strict": STRICT.spec.hash, "mail": tasks[2]["schema_hash"],
    }
    detail = client.get("/v1/tasks/ticket").json()
    assert detail["schema_hash"] == TICKET.spec.hash and detail["layout"] == TICKET.spec.layout()
    assert detail["input_schema"]["properties"]["text"]["type"] == "string"
    assert "priority" in detail["decision_schema"]["properties"]
    assert {f["name"]: f["values"] for f in detail["fields"]}["sentiment"] == ["pos", "neg", None]
    assert detail["max_input_tokens"] == MAX_INPUT_TOKENS and detail["truncate"] is False
    assert_problem(client.get("/v1/tasks/nope"), 404)


def test_models_and_calibration(client):
    models = client.get("/v1/models").json()
    assert models["model_id"] and set(models["tasks"]) == {"ticket", "strict", "mail"}
    mail = models["tasks"]["mail"]
    assert mail["reference"] == "schemas.mail:TASK" and mail["calibrated"] is False
    report = client.get("/v1/models/calibration").json()
    assert report["calibrated"] is False
    assert report["tasks"]["ticket"] == {"calibrated": False, "calibrator_id": None, "calibration": None, "metrics": {}}


def test_health_metrics_openapi_and_page(client):
    assert client.get("/health/live").json() == {"status": "live"}
    assert client.get("/health/ready").json() == {"status": "ready"}
    client.post("/v1/decide/ticket", json={"input": ticket("refund")})
    client.post("/v1/decide/ticket", content=b"{", headers={"content-type": "application/json"})
    metrics = client.get("/metrics")
    assert metrics.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = metrics.text
    assert 'jev_http_requests_total{method="POST",route="/v1/decide/ticket",status="200"} 1.0' in text
    assert 'jev_http_requests_total{method="POST",route="/v1/decide/ticket",status="400"} 1.0' in text
    for name in ("jev_queue_seconds_bucket", "jev_compute_seconds_bucket", "jev_batch_size_bucket",
                 'jev_field_confidence_bucket{field="priority"'):
        assert name in text
    schema = client.get("/schema/openapi.json").json()
    paths = {"/v1/decide/ticket", "/v1/decide/ticket/batch", "/v1/decide/mail", "/v1/tasks/{task}"}
    assert paths <= set(schema["paths"])
    assert "TicketDecideRequest" in schema["components"]["schemas"]
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert "app.js" in page.text
    assert client.get("/static/app.js").status_code == 200


def test_malformed_json_is_400(client):
    response = client.post("/v1/decide/ticket", content=b'{"input": ', headers={"content-type": "application/json"})
    body = assert_problem(response, 400)
    assert body["title"] == "Malformed JSON" and "not valid JSON" in body["detail"]


def test_schema_failures_are_422_naming_every_field(client):
    body = assert_problem(client.post("/v1/decide/ticket", json={"input": {"text": 5, "customer": {"name": ""}}}), 422)
    assert {e["loc"] for e in body["errors"]} == {"input.text", "input.customer.name"}
    batch = client.post("/v1/decide/ticket/batch", json={"inputs": [ticket("ok"), {"customer": {}}]})
    body = assert_problem(batch, 422)
    assert {e["loc"] for e in body["errors"]} == {"inputs.1.text", "inputs.1.customer.name"}
    assert_problem(client.post("/v1/decide/ticket", json={"inputs": []}), 422)
    assert_problem(client.post("/v1/decide/ticket/batch", json={"inputs": []}), 422)
    too_many = assert_problem(client.post("/v1/decide/ticket/batch", json={"inputs": [ticket("a")] * 65}), 422)
    assert too_many["errors"][0]["loc"] == "inputs"


def test_input_longer_than_the_model_reads_is_422_saying_by_how_much(client):
    body = assert_problem(client.post("/v1/decide/strict", json={"input": {"text": "refund " * 60}}), 422)
    assert body["limit"] == MAX_INPUT_TOKENS and body["tokens"] > MAX_INPUT_TOKENS
    assert f"{body['tokens'] - MAX_INPUT_TOKENS} over the limit" in body["detail"]
    truncated = client.post("/v1/decide/mail", json={"input": {"body": "win a cruise " * 60}})
    assert truncated.status_code == 200 and truncated.json()["model"]["truncated_input"] is True


def test_unknown_task_is_404(client):
    for path in ("/v1/decide/nope", "/v1/decide/nope/batch"):
        body = assert_problem(client.post(path, json={"input": {}}), 404)
        assert "ticket" in body["detail"]


def test_body_over_the_limit_is_413(make_client):
    client, _ = make_client(max_body_bytes=2000)
    body = assert_problem(client.post("/v1/decide/ticket", json={"input": ticket("x" * 5000)}), 413)
    assert body["limit"] == 2000 and "2000 bytes" in body["detail"]
    assert "--max-body-bytes" in body["detail"] and "JEV_MAX_BODY_BYTES" in body["detail"]


def test_queue_full_is_429_with_retry_after(make_client):
    client, engine = make_client(max_batch=1, max_wait_ms=0, max_queue=2, max_batch_inputs=2, retry_after_s=3)
    engine.gate.clear()
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(client.post, "/v1/decide/ticket", json={"input": ticket("a")})
        _wait_for(engine.entered.is_set)
        queued = pool.submit(client.post, "/v1/decide/ticket/batch", json={"inputs": [ticket("b"), ticket("c")]})
        _wait_for(lambda: _depth(client) >= 2)
        refused = client.post("/v1/decide/ticket", json={"input": ticket("d")})
        engine.gate.set()
        assert first.result().status_code == 200 and queued.result().status_code == 200
    assert_problem(refused, 429)
    assert refused.headers["retry-after"] == "3"


def test_request_past_its_deadline_is_504_and_its_work_is_dropped(make_client):
    client, engine = make_client(max_batch=1, max_wait_ms=0, request_timeout_s=0.3)
    engine.gate.clear()
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(client.post, "/v1/decide/ticket", json={"input": ticket("a")})
        _wait_for(engine.entered.is_set)
        waiting = pool.submit(client.post, "/v1/decide/ticket", json={"input": ticket("b")})
        assert_problem(running.result(), 504)
        assert_problem(waiting.result(), 504)
    engine.sizes.clear()
    engine.gate.set()
    _wait_for(lambda: len(engine.sizes) >= 1)
    assert client.post("/v1/decide/ticket", json={"input": ticket("c")}).status_code in (200, 504)
    assert engine.sizes[0] == 1, "the expired request's work was dropped, only the running pass finished"


def test_api_keys_guard_everything_but_health_and_page(make_client):
    client, _ = make_client(api_keys=("k1", "k2"))
    body = assert_problem(client.get("/v1/tasks"), 401)
    assert "API key" in body["detail"]
    assert client.get("/v1/tasks").headers["www-authenticate"].startswith("Bearer")
    assert_problem(client.get("/v1/tasks", headers={"Authorization": "Bearer nope"}), 401)
    assert_problem(client.post("/v1/decide/ticket", json={"input": ticket("a")}), 401)
    assert client.get("/v1/tasks", headers={"Authorization": "Bearer k2"}).status_code == 200
    assert client.get("/v1/tasks", headers={"X-API-Key": "k1"}).status_code == 200
    for open_path in ("/health/live", "/health/ready", "/", "/static/app.js"):
        assert client.get(open_path).status_code == 200, open_path


def test_shutdown_finishes_work_in_flight_and_refuses_new_work(decider):
    engine = GatedEngine(decider)
    client = TestClient(create_app(engine, ServeSettings(max_batch=1, max_wait_ms=0)))
    client.__enter__()
    wait_ready(client.get)
    engine.entered.clear()
    engine.gate.clear()
    with ThreadPoolExecutor(2) as pool:
        in_flight = pool.submit(client.post, "/v1/decide/ticket", json={"input": ticket("a")})
        _wait_for(engine.entered.is_set)
        closing = threading.Thread(target=client.__exit__, args=(None, None, None))
        closing.start()
        _wait_for(lambda: _service(client).batcher.closed)
        refused = client.post("/v1/decide/ticket", json={"input": ticket("b")})
        not_ready = client.get("/health/ready")
        engine.gate.set()
        closing.join(10)
        assert in_flight.result().status_code == 200
    body = assert_problem(refused, 503)
    assert "shutting down" in body["detail"] and refused.headers["retry-after"] == "1"
    assert "draining" in assert_problem(not_ready, 503)["detail"]


def _service(client):
    return client.app.dependencies["service"].dependency()


def _depth(client) -> int:
    return _service(client).batcher.depth


def _wait_for(condition, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError("condition never held")
        time.sleep(0.01)
