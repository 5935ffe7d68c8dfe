"""Every refusal as an RFC 9457 problem (`application/problem+json`), never a bare 500 for client input.

Routes raise `ProblemError` (or let Jev's own errors through); the handlers here turn those, and
litestar's own HTTP errors (404 route, 405, 413 body), into one `Problem` shape. A request body
that fails the task's Struct is re-checked by the task's pydantic input model, so the 422 names
every invalid field at once rather than only the first one msgspec met.
"""

import logging
from collections.abc import Callable
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import HTTPException, SerializationException, ValidationException
from litestar.utils.scope.state import ScopeState

from jev.schema import InputTooLongError, InvalidInputError, JevError, Task
from jev.serve.batcher import DeadlinePassedError, QueueFullError, ShuttingDownError
from jev.serve.wire import Problem, ProblemItem

MEDIA_TYPE = "application/problem+json"
_log = logging.getLogger("jev.serve")


class ProblemError(Exception):
    """Raise from a route to answer with this problem (and optional headers)."""

    def __init__(self, problem: Problem, headers: dict[str, str] | None = None) -> None:
        super().__init__(problem.detail or problem.title)
        self.problem = problem
        self.headers = headers or {}


def problem_response(problem: Problem, headers: dict[str, str] | None = None) -> Response:
    return Response(problem, status_code=problem.status, media_type=MEDIA_TYPE, headers=headers)


def input_problem(error: InvalidInputError | InputTooLongError, prefix: str) -> ProblemError:
    """422 for an input the engine refused; `prefix` places field paths in the body (`input.`)."""
    if isinstance(error, InputTooLongError):
        return ProblemError(Problem(
            title="Input too long", status=422, detail=str(error), tokens=error.tokens, limit=error.limit,
            errors=[ProblemItem(prefix.rstrip(".") or "$", str(error))],
        ))
    return ProblemError(Problem(
        title="Invalid input", status=422, detail=error.summary,
        errors=[ProblemItem(_join(prefix, p["loc"]), p["msg"]) for p in error.problems],
    ))


def handle_problem(request: Request, error: ProblemError) -> Response:
    return problem_response(_with_instance(error.problem, request), error.headers)


def handle_http(request: Request, error: HTTPException) -> Response:
    headers = dict(error.headers or {})
    if error.status_code == 401:
        headers.setdefault("WWW-Authenticate", 'Bearer realm="jev"')
    extra = error.extra if isinstance(error.extra, list) else []
    errors = [ProblemItem(str(e.get("key", "$")), str(e.get("message", ""))) for e in extra if isinstance(e, dict)]
    title, detail, limit = _TITLES.get(error.status_code, "HTTP error"), str(error.detail), None
    if isinstance(error.__cause__, SerializationException):
        title, detail = "Malformed JSON", f"the body is not valid JSON: {detail}"
    if error.status_code == 413:
        limit = request.app.state.get("max_body_bytes")
        detail = (
            f"the body is over the limit of {limit} bytes; send less (a batch can be split into several "
            "requests), or raise the limit with --max-body-bytes / JEV_MAX_BODY_BYTES"
        )
    problem = Problem(title=title, status=error.status_code, detail=detail, errors=errors, limit=limit)
    return problem_response(_with_instance(problem, request), headers)


def handle_jev(request: Request, error: JevError) -> Response:
    """Jev errors that escape a route: the batcher's refusals, or an engine failure (a real 500)."""
    retry = {"Retry-After": str(request.app.state.get("retry_after_s", 1))}
    if isinstance(error, QueueFullError):
        problem, headers = Problem(title="Too many requests", status=429, detail=str(error)), retry
    elif isinstance(error, ShuttingDownError):
        problem, headers = Problem(title="Shutting down", status=503, detail=str(error)), retry
    elif isinstance(error, DeadlinePassedError):
        problem, headers = Problem(title="Deadline exceeded", status=504, detail=str(error)), {}
    else:
        return handle_internal(request, error)
    return problem_response(_with_instance(problem, request), headers)


def handle_internal(request: Request, error: Exception) -> Response:
    _log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=error)
    problem = Problem(title="Internal server error", status=500, detail="the server failed; this is not your fault")
    return problem_response(_with_instance(problem, request))


def body_problem_handler(task: Task, batch: bool) -> Callable[[Request, ValidationException], Response]:
    """A handler for a decide route whose body failed its Struct: pydantic lists every problem."""

    def handle(request: Request, error: ValidationException) -> Response:
        body = ScopeState.from_scope(request.scope).body
        try:
            data = msgspec.json.decode(body) if isinstance(body, bytes) else None
        except msgspec.DecodeError:
            data = None
        found = _body_problems(task, data, batch, request.app.state.get("max_batch_inputs", 0))
        if not found:
            extra = error.extra if isinstance(error.extra, list) else []
            found = [ProblemItem(str(e.get("key") or "$"), str(e.get("message", ""))) for e in extra]
        problem = Problem(title="Invalid input", status=422, detail=f"the body does not fit task {task.name!r}",
                          errors=found)
        return problem_response(_with_instance(problem, request))

    return handle


def _body_problems(task: Task, data: Any, batch: bool, max_inputs: int) -> list[ProblemItem]:
    key = "inputs" if batch else "input"
    if not isinstance(data, dict):
        return [ProblemItem("$", f"expected a JSON object with {key!r}")]
    unknown = [ProblemItem(name, f"unknown field: the body holds only {key!r}") for name in data if name != key]
    if key not in data:
        return [ProblemItem(key, "Field required"), *unknown]
    return unknown + _inputs_problems(task, data[key], batch, max_inputs)


def _inputs_problems(task: Task, data: Any, batch: bool, max_inputs: int) -> list[ProblemItem]:
    if not batch:
        return _input_problems(task, data, "input.")
    if not isinstance(data, list):
        return [ProblemItem("inputs", "expected a list of inputs")]
    if not 1 <= len(data) <= max_inputs:
        return [ProblemItem("inputs", f"expected 1 to {max_inputs} inputs, got {len(data)}")]
    return [p for i, item in enumerate(data) for p in _input_problems(task, item, f"inputs.{i}.")]


def _input_problems(task: Task, data: Any, prefix: str) -> list[ProblemItem]:
    if not isinstance(data, dict):
        return [ProblemItem(prefix.rstrip("."), f"expected a {task.input_model.__name__} object")]
    try:
        task.parse_input(data)
    except InvalidInputError as error:
        return [ProblemItem(_join(prefix, p["loc"]), p["msg"]) for p in error.problems]
    return []


def _join(prefix: str, loc: str) -> str:
    return prefix.rstrip(".") if loc == "$" else prefix + loc


def _with_instance(problem: Problem, request: Request) -> Problem:
    return msgspec.structs.replace(problem, instance=request.url.path)


_TITLES = {
    400: "Bad request", 401: "Unauthorized", 403: "Forbidden", 404: "Not found", 405: "Method not allowed",
    413: "Request body too large", 415: "Unsupported media type", 422: "Invalid input",
    429: "Too many requests", 500: "Internal server error", 503: "Service unavailable", 504: "Deadline exceeded",
}
