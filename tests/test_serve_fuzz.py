"""Fuzz the API from its own OpenAPI document: no 5xx, and every answer matches the documented schema."""

import itertools
import threading

import httpx
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from jev.serve.app import create_app
from jev.serve.settings import ServeSettings
from tests.serving import free_port, tiny_decider, wait_ready

MAX_EXAMPLES = 5
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def api_schema():
    """The app under uvicorn in a thread on loopback, so its lifespan runs once for every case."""
    app = create_app(tiny_decider(), ServeSettings(max_wait_ms=1, request_timeout_s=10, max_batch_inputs=4))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, timeout=5) as http:
        wait_ready(http.get)
    yield schemathesis.openapi.from_url(f"{base}/schema/openapi.json")
    server.should_exit = True
    thread.join(10)


@pytest.mark.slow
def test_api_matches_its_openapi_document(api_schema):
    """Every documented operation, MAX_EXAMPLES valid and MAX_EXAMPLES invalid cases each
    (schemathesis' pytest plugin fails under pytest 9, so hypothesis drives the strategies)."""
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 10
    for operation, mode in itertools.product(operations, GenerationMode):

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def call(case) -> None:
            case.call_and_validate(checks=CHECKS)

        try:
            call()
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE, operation.label  # nothing invalid to send to GET /health/live
