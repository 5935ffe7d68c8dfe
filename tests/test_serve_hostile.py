"""Hostile input on every route: malformed, deep, huge, NaN, wrong types, extra fields, empty values,
non-UTF-8 bytes and wrong content types. Each answer is a 4xx problem detail naming the problem, never
a 5xx, and the server answers the next valid request as it did before."""

import json

import pytest
from litestar.testing import TestClient

from jev.decide.decider import NOTHING_TO_READ
from jev.schema.errors import UNKNOWN_FIELD
from jev.serve.app import create_app
from jev.serve.settings import ServeSettings
from tests.serving import ticket, tiny_decider, wait_ready

pytestmark = pytest.mark.slow

PROBLEM = "application/problem+json"
JSON = {"content-type": "application/json"}
DEPTH = 32
MAX_BODY = 700_000
VALID = {"ticket": ticket("refund please"), "strict": {"text": "refund please"}, "mail": {"body": "Win a cruise!"}}
TEXT = {"ticket": "text", "strict": "text", "mail": "body"}
EMPTY = {"ticket": {"text": "", "customer": {"name": ""}}, "strict": {"text": ""}, "mail": {"body": ""}}
EMPTY_SAYS = {"ticket": "at least 1 character", "strict": NOTHING_TO_READ, "mail": "at least 1 character"}
GET_ROUTES = ["/v1/tasks", "/v1/tasks/ticket", "/v1/models", "/v1/models/calibration", "/health/live",
              "/health/ready", "/metrics", "/", "/static/app.js", "/schema", "/schema/openapi.json",
              "/schema/assets/swagger-ui.css"]


@pytest.fixture(scope="module")
def client():
    settings = ServeSettings(max_wait_ms=1, max_json_depth=DEPTH, max_body_bytes=MAX_BODY)
    with TestClient(create_app(tiny_decider(), settings)) as http:
        wait_ready(http.get)
        yield http


@pytest.fixture(scope="module")
def baseline(client):
    """Each decide route's answer to its valid body before any hostile request."""
    return {path: _decide(client, path, body) for path, body in _valid_bodies().items()}


def _valid_bodies() -> dict[str, bytes]:
    bodies = {}
    for task, data in VALID.items():
        bodies[f"/v1/decide/{task}"] = json.dumps({"input": data}).encode()
        bodies[f"/v1/decide/{task}/batch"] = json.dumps({"inputs": [data, data]}).encode()
    return bodies


def _decide(client, path: str, body: bytes) -> dict:
    response = client.post(path, content=body, headers=JSON)
    assert response.status_code == 200, response.text
    answer = response.json()
    for result in answer.get("results", [answer]):
        result.pop("usage")  # timings differ from call to call
    return answer


def _wrap(path: str, item: str) -> bytes:
    """A body holding `item` (JSON text) where the route expects its input(s)."""
    return (f'{{"inputs": [{item}]}}' if path.endswith("/batch") else f'{{"input": {item}}}').encode()


def _cases(task: str, path: str) -> list[tuple[str, bytes, dict, int, str]]:
    """(name, body, headers, status, a phrase the problem must contain)."""
    text, good = TEXT[task], json.dumps(VALID[task])

    def replaced(value: str) -> bytes:
        """The valid input with its text field's value replaced by `value` (JSON text)."""
        return _wrap(path, json.dumps({**VALID[task], text: "@VALUE@"}).replace('"@VALUE@"', value))

    cases = [
        ("truncated", _wrap(path, good)[:-3], JSON, 400, "not valid JSON"),
        ("not JSON at all", b"input=hello", JSON, 400, "not valid JSON"),
        ("huge", _wrap(path, json.dumps({**VALID[task], text: "x" * MAX_BODY})), JSON, 413, "JEV_MAX_BODY_BYTES"),
        ("non-UTF-8", replaced('"caf@"').replace(b"caf@", b"caf\xe9"), JSON, 400, "UTF-8"),
        ("wrong type", replaced("5"), JSON, 422, f"{text}"),
        ("list for an input", _wrap(path, "[]"), JSON, 422, "object"),
        ("string for a body", b'"hello"', JSON, 422, "JSON object"),
        ("null body", b"null", JSON, 422, "JSON object"),
        ("empty body", b"", JSON, 422, "JSON object"),
        ("empty object", b"{}", JSON, 422, "Field required"),
        ("empty input", _wrap(path, "{}"), JSON, 422, "Field required"),
        ("empty values", _wrap(path, json.dumps(EMPTY[task])), JSON, 422, EMPTY_SAYS[task]),
        ("extra field in input", _wrap(path, good[:-1] + ', "subject": "x"}'), JSON, 422, UNKNOWN_FIELD),
        ("extra field in body", _wrap(path, good)[:-1] + b', "foo": 1}', JSON, 422, "unknown field"),
    ]
    if task != "ticket":  # a ticket always says something: its customer's plan and attachments have defaults
        cases.append(("blank text", replaced('"  \\n\\t "'), JSON, 422, NOTHING_TO_READ))
    for literal in ("NaN", "Infinity", "-Infinity", "1e999"):
        cases.append((f"number {literal}", replaced(literal), JSON, 400, "not valid JSON"))
    for levels in (100, 1_000, 100_000):
        cases.append((f"{levels} arrays deep", replaced("[" * levels + "]" * levels), JSON, 400, "--max-json-depth"))
        objects = '{"a":' * levels + "1" + "}" * levels
        cases.append((f"{levels} objects deep", replaced(objects), JSON, 400, "JEV_MAX_JSON_DEPTH"))
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                         "application/json; charset=latin-1", "application/xml"):
        cases.append((content_type, _wrap(path, good), {"content-type": content_type}, 415, "application/json"))
    cases.append(("no content type", _wrap(path, good), {}, 415, "no Content-Type"))
    return cases


DECIDE_CASES = [
    (path, case)
    for task in VALID
    for path in (f"/v1/decide/{task}", f"/v1/decide/{task}/batch")
    for case in _cases(task, path)
]


def assert_problem(response, status: int, phrase: str) -> dict:
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"] == PROBLEM
    problem = response.json()
    assert problem["status"] == status and problem["title"]
    said = problem["detail"] + " " + " ".join(f"{e['loc']} {e['msg']}" for e in problem.get("errors", []))
    assert phrase in said, problem
    return problem


@pytest.mark.parametrize(("path", "case"), DECIDE_CASES, ids=[f"{p} {c[0]}" for p, c in DECIDE_CASES])
def test_hostile_bodies_get_a_4xx_problem_and_the_next_request_its_answer(client, baseline, path, case):
    _, body, headers, status, phrase = case
    assert_problem(client.post(path, content=body, headers=headers), status, phrase)
    assert _decide(client, path, _valid_bodies()[path]) == baseline[path]


def test_the_valid_bodies_of_the_matrix_are_answered(client, baseline):
    """The matrix's cases are refusals of otherwise valid bodies, so a refusal is for the stated reason."""
    for path, body in _valid_bodies().items():
        assert _decide(client, path, body) == baseline[path]
    depth_ok = '{"input": {"text": "a", "customer": {"name": "Ada"}}}'
    assert client.post("/v1/decide/ticket", content=depth_ok.encode(), headers=JSON).status_code == 200
    assert client.post("/v1/decide/strict", content=_wrap("/", '{"text": "[[[{{ in a string ]]"}'),
                       headers={"content-type": "application/json; charset=utf-8"}).status_code == 200


def test_the_limits_are_named_with_the_settings_that_raise_them(client):
    deep = assert_problem(client.post("/v1/decide/strict", content=b'{"input": ' + b"[" * 1000 + b"]" * 1000 + b"}",
                                      headers=JSON), 400, "--max-json-depth")
    assert deep["limit"] == DEPTH and f"more than {DEPTH} levels" in deep["detail"]
    huge = assert_problem(client.post("/v1/decide/strict", content=b" " * (MAX_BODY + 1), headers=JSON),
                          413, "--max-body-bytes")
    assert huge["limit"] == MAX_BODY and f"limit of {MAX_BODY} bytes" in huge["detail"]
    extra = assert_problem(client.post("/v1/decide/mail", json={"input": {"body": "hi", "subject": "x"}, "foo": 1}),
                           422, "unknown field")
    assert {e["loc"] for e in extra["errors"]} == {"foo", "input.subject"}


def test_json_depth_counts_brackets_outside_strings_only():
    from jev.serve.body import json_depth

    assert json_depth(b'{"a": [1, {"b": []}]}', 10) == 4
    assert json_depth(b'{"a": "[[[[[[{{{{", "b": "\\"[[["}', 10) == 1
    assert json_depth(b"[" * 100_000, 5) == 6, "counting stops past the limit"
    assert json_depth(b'"just a string"', 10) == 0


@pytest.mark.parametrize("path", GET_ROUTES)
def test_other_methods_on_read_routes_get_a_405_problem(client, path):
    assert client.get(path).status_code == 200, path
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        body = b'{"a": ' * 1000 + b"1" + b"}" * 1000
        assert_problem(client.request(method, path, content=body, headers=JSON), 405, "Method Not Allowed")
    assert client.get(path).status_code == 200


@pytest.mark.parametrize("path", ["/v1/tasks/%ff%fe", "/v1/tasks/" + "a" * 60_000, "/v1/tasks/%00",
                                  "/v1/tasks/..%2f..%2fetc", "/v1/decide/%ff", "/static/%ff",
                                  "/static/../../pyproject.toml", "/static/" + "a/" * 1000 + "x", "/nope"])
def test_hostile_paths_get_a_404_problem(client, path):
    method = client.post if path.startswith("/v1/decide") else client.get
    kwargs = {"json": {"input": VALID["strict"]}} if method == client.post else {}
    assert_problem(method(path, **kwargs), 404, "")
    assert client.get("/v1/tasks/ticket").status_code == 200


def test_every_route_of_the_app_is_in_the_matrix(client):
    covered = {path for path, _ in DECIDE_CASES} | set(GET_ROUTES)
    templates = {route.path for route in client.app.routes}
    concrete = {p.replace("{task:str}", "ticket").replace("{task}", "ticket") for p in templates}
    uncovered = {p for p in concrete if p not in covered and "{" not in p and not p.startswith("/schema/")}
    assert not uncovered, f"routes without hostile-input cases: {sorted(uncovered)}"
    assert "/static/{file_path:path}" in templates and "/schema/openapi.json" in templates


@pytest.mark.parametrize("path", GET_ROUTES)
def test_text_answers_name_their_charset_once(client, path):
    content_type = client.get(path).headers["content-type"]
    assert content_type.count("charset") <= 1, content_type
