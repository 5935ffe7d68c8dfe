"""Typed clients for a Jev server: the same `Decided[Decision]` as the local `Decider`, over HTTP.

    from jev import Client
    with Client("http://127.0.0.1:8000", api_key="...") as client:
        result = client.decide(MailDecision, {"body": "Win a free cruise!"})
        result.value.kind, result.probs["kind"]["spam"]

Only pydantic, httpx and `jev.schema` are needed (no torch, no model). Before the first decision
of a decision model the client finds the server's task with the same schema hash and fails with
`SchemaMismatchError` naming the changed fields if the server's schema differs, so a stale client
never misreads an answer.

Retries: connection errors and 408, 409, 429 and 5xx responses are retried up to `max_retries`
times, with exponential backoff (0.5 s doubling, at most 8 s, jittered) or the server's
`Retry-After`. `timeout` is TOTAL per call: it covers every attempt and every wait between them,
and a call raises `APITimeoutError` once it is spent. The async client enforces it exactly; the
sync client bounds each connect, write and read by the time left, so a server that trickles a
response byte by byte can overrun it by at most one read (Jev's server never does).
"""

import random
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Generic, TypeVar

import anyio
import httpx
from pydantic import BaseModel

from jev.schema import (
    Decided,
    DecisionSpec,
    FieldOutcome,
    JevError,
    SchemaMismatchError,
    Usage,
    compile_decision,
    describe_changes,
)
from jev.schema.keys import keys_for

DecisionT = TypeVar("DecisionT", bound=BaseModel)

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
INITIAL_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
MAX_RETRY_AFTER_S = 60.0


class APIError(JevError):
    """Base of the client's errors."""


class APIConnectionError(APIError):
    """The server could not be reached (after retries)."""


class APITimeoutError(APIError):
    """The call's total timeout was spent."""


class APIStatusError(APIError):
    """The server answered with an error; `problem` is its RFC 9457 body (`title`, `detail`, `errors`)."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        self.errors: list[dict[str, str]] = problem.get("errors", [])
        lines = [f"{status} {problem.get('title', '')}: {problem.get('detail', '')}".rstrip(": ")]
        lines += [f"  {e.get('loc')}: {e.get('msg')}" for e in self.errors]
        super().__init__("\n".join(lines))


class BadRequestError(APIStatusError):
    """400: the body is not valid JSON."""


class AuthenticationError(APIStatusError):
    """401: missing or unknown API key."""


class NotFoundError(APIStatusError):
    """404: no such task or route."""


class PayloadTooLargeError(APIStatusError):
    """413: the body exceeds the server's limit."""


class InvalidInputError(APIStatusError):
    """422: the input does not fit the task (see `errors`), or is longer than the model reads."""


class RateLimitError(APIStatusError):
    """429: the server's queue is full."""


class ServerError(APIStatusError):
    """5xx: the server failed, is not ready, is shutting down (503) or missed the deadline (504)."""


_STATUS_ERRORS: dict[int, type[APIStatusError]] = {
    400: BadRequestError, 401: AuthenticationError, 404: NotFoundError, 413: PayloadTooLargeError,
    422: InvalidInputError, 429: RateLimitError,
}


def status_error(status: int, problem: dict[str, Any]) -> APIStatusError:
    kind = _STATUS_ERRORS.get(status, ServerError if status >= 500 else APIStatusError)
    return kind(status, problem)


@dataclass(frozen=True)
class Binding(Generic[DecisionT]):
    """A local decision model matched to a server task: where to post, how to read `probs` keys."""

    task: str
    decision: type[DecisionT]
    keys: dict[str, dict[str, Any]]

    def decided(self, payload: dict[str, Any]) -> Decided[DecisionT]:
        """The server's JSON answer as the local runtime's `Decided[Decision]`, probs keyed by typed values.

        `model` holds what the local runtime reports plus the server's `task`, `name` and `calibrator_id`.
        """
        probs = {
            name: {self.keys[name][key]: p for key, p in table.items()} for name, table in payload["probs"].items()
        }
        return Decided[self.decision](
            value=self.decision.model_validate(payload["value"]),
            probs=probs,
            outcomes={name: FieldOutcome.model_validate(o) for name, o in payload.get("outcomes", {}).items()},
            usage=Usage.model_validate(payload["usage"]),
            model=payload.get("model", {}),
        )


class _Core:
    """What both clients share: settings, headers, task matching, retry timing. No I/O here."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float, max_retries: int) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, got {max_retries}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_retries = max_retries
        self.headers = {"Accept": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.bindings: dict[tuple[type[BaseModel], str | None], Binding] = {}

    @staticmethod
    def pick_task(spec: DecisionSpec, tasks: list[dict[str, Any]], task: str | None) -> tuple[str | None, str | None]:
        """(task whose hash matches, or None; a task to explain the mismatch with, or None)."""
        candidates = [t for t in tasks if task is None or t["name"] == task]
        for t in candidates:
            if t["schema_hash"] == spec.hash:
                return t["name"], None
        named = [t for t in candidates if task is not None or t["decision_model"] == spec.model.__name__]
        return None, named[0]["name"] if named else None

    @staticmethod
    def mismatch(spec: DecisionSpec, detail: dict[str, Any]) -> SchemaMismatchError:
        return SchemaMismatchError(describe_changes(detail["layout"], spec.layout()), detail["name"])

    @staticmethod
    def unknown(spec: DecisionSpec, tasks: list[dict[str, Any]], task: str | None) -> APIError:
        offered = {t["name"]: t["decision_model"] for t in tasks}
        wanted = repr(task) if task else f"deciding {spec.model.__name__} (schema {spec.hash[:12]})"
        return APIError(f"the server has no task {wanted}; its tasks and decision models are {offered}")

    @staticmethod
    def bind(spec: DecisionSpec, task: str) -> Binding:
        return Binding(task, spec.model, {f.name: keys_for(f.name, f.values) for f in spec.closed_fields})

    @staticmethod
    def body(data: BaseModel | dict[str, Any]) -> Any:
        return data.model_dump(mode="json", by_alias=True) if isinstance(data, BaseModel) else data

    def delay(self, attempt: int, response: httpx.Response | None) -> float:
        """Seconds before retry `attempt` (0-based): the server's Retry-After, else jittered backoff."""
        if response is not None:
            after = retry_after(response)
            if after is not None:
                return after
        backoff = min(MAX_BACKOFF_S, INITIAL_BACKOFF_S * 2**attempt)
        return backoff * (1 - 0.25 * random.random())

    @staticmethod
    def retryable(response: httpx.Response) -> bool:
        return response.status_code in RETRY_STATUSES or response.status_code >= 500

    @staticmethod
    def result(response: httpx.Response) -> Any:
        if response.is_success:
            return response.json()
        try:
            problem = response.json()
        except ValueError:
            problem = {"title": response.reason_phrase, "detail": response.text[:500]}
        raise status_error(response.status_code, problem if isinstance(problem, dict) else {"detail": str(problem)})


def retry_after(response: httpx.Response) -> float | None:
    """The Retry-After header in seconds (delta-seconds or an HTTP date), capped; None when absent."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


class Client:
    """Synchronous client. `timeout` (seconds) is total per call, retries included."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        http_client: httpx.Client | None = None,
    ) -> None:
        self._core = _Core(base_url, api_key, timeout, max_retries)
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool, unless it was passed in (its owner closes it)."""
        if self._owns_http:
            self._http.close()

    def decide(
        self, decision: type[DecisionT], data: BaseModel | dict[str, Any], task: str | None = None
    ) -> Decided[DecisionT]:
        """Decide one input remotely; the answer is typed exactly as `Decider.decide` types it."""
        deadline = time.monotonic() + self._core.timeout
        binding = self._bind(decision, task, deadline)
        payload = self._request("POST", f"/v1/decide/{binding.task}", {"input": self._core.body(data)}, deadline)
        return binding.decided(payload)

    def decide_batch(
        self, decision: type[DecisionT], inputs: list[BaseModel | dict[str, Any]], task: str | None = None
    ) -> list[Decided[DecisionT]]:
        """Decide many inputs in one request (the server bounds how many), answers in input order."""
        deadline = time.monotonic() + self._core.timeout
        binding = self._bind(decision, task, deadline)
        body = {"inputs": [self._core.body(data) for data in inputs]}
        payload = self._request("POST", f"/v1/decide/{binding.task}/batch", body, deadline)
        return [binding.decided(item) for item in payload["results"]]

    def tasks(self) -> list[dict[str, Any]]:
        return self._request("GET", "/v1/tasks", None, time.monotonic() + self._core.timeout)["tasks"]

    def task(self, name: str) -> dict[str, Any]:
        return self._request("GET", f"/v1/tasks/{name}", None, time.monotonic() + self._core.timeout)

    def model(self) -> dict[str, Any]:
        return self._request("GET", "/v1/models", None, time.monotonic() + self._core.timeout)

    def _bind(self, decision: type[DecisionT], task: str | None, deadline: float) -> Binding[DecisionT]:
        key = (decision, task)
        if key not in self._core.bindings:
            spec = compile_decision(decision)
            tasks = self._request("GET", "/v1/tasks", None, deadline)["tasks"]
            found, explain = self._core.pick_task(spec, tasks, task)
            if found is None:
                if explain is None:
                    raise self._core.unknown(spec, tasks, task)
                raise self._core.mismatch(spec, self._request("GET", f"/v1/tasks/{explain}", None, deadline))
            self._core.bindings[key] = self._core.bind(spec, found)
        return self._core.bindings[key]

    def _request(self, method: str, path: str, body: Any, deadline: float) -> Any:
        core = self._core
        for attempt in range(core.max_retries + 1):
            left = deadline - time.monotonic()
            if left <= 0:
                raise APITimeoutError(f"{method} {path}: no answer within the {core.timeout:g} s timeout")
            response = None
            try:
                response = self._http.request(
                    method, core.base_url + path, json=body, headers=core.headers, timeout=httpx.Timeout(left)
                )
            except httpx.TimeoutException:
                raise APITimeoutError(f"{method} {path}: no answer within the {core.timeout:g} s timeout") from None
            except httpx.TransportError as error:
                if attempt == core.max_retries:
                    raise APIConnectionError(f"{method} {path}: {error!r}") from error
            if response is not None and (not core.retryable(response) or attempt == core.max_retries):
                return core.result(response)
            wait = core.delay(attempt, response)
            if time.monotonic() + wait >= deadline:
                if response is not None:
                    return core.result(response)
                raise APITimeoutError(f"{method} {path}: the {core.timeout:g} s timeout leaves no time to retry")
            time.sleep(wait)
        raise AssertionError("unreachable: the last attempt returns or raises")


class AsyncClient:
    """Asynchronous client (asyncio or trio). `timeout` (seconds) is total per call, retries included."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._core = _Core(base_url, api_key, timeout, max_retries)
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool, unless it was passed in (its owner closes it)."""
        if self._owns_http:
            await self._http.aclose()

    async def decide(
        self, decision: type[DecisionT], data: BaseModel | dict[str, Any], task: str | None = None
    ) -> Decided[DecisionT]:
        """Decide one input remotely; the answer is typed exactly as `Decider.decide` types it."""
        with self._deadline():
            binding = await self._bind(decision, task)
            payload = await self._request("POST", f"/v1/decide/{binding.task}", {"input": self._core.body(data)})
            return binding.decided(payload)

    async def decide_batch(
        self, decision: type[DecisionT], inputs: list[BaseModel | dict[str, Any]], task: str | None = None
    ) -> list[Decided[DecisionT]]:
        """Decide many inputs in one request (the server bounds how many), answers in input order."""
        with self._deadline():
            binding = await self._bind(decision, task)
            body = {"inputs": [self._core.body(data) for data in inputs]}
            payload = await self._request("POST", f"/v1/decide/{binding.task}/batch", body)
            return [binding.decided(item) for item in payload["results"]]

    async def tasks(self) -> list[dict[str, Any]]:
        with self._deadline():
            return (await self._request("GET", "/v1/tasks", None))["tasks"]

    async def task(self, name: str) -> dict[str, Any]:
        with self._deadline():
            return await self._request("GET", f"/v1/tasks/{name}", None)

    async def model(self) -> dict[str, Any]:
        with self._deadline():
            return await self._request("GET", "/v1/models", None)

    def _deadline(self) -> AbstractContextManager[None]:
        return _total_timeout(self._core.timeout)

    async def _bind(self, decision: type[DecisionT], task: str | None) -> Binding[DecisionT]:
        key = (decision, task)
        if key not in self._core.bindings:
            spec = compile_decision(decision)
            tasks = (await self._request("GET", "/v1/tasks", None))["tasks"]
            found, explain = self._core.pick_task(spec, tasks, task)
            if found is None:
                if explain is None:
                    raise self._core.unknown(spec, tasks, task)
                raise self._core.mismatch(spec, await self._request("GET", f"/v1/tasks/{explain}", None))
            self._core.bindings[key] = self._core.bind(spec, found)
        return self._core.bindings[key]

    async def _request(self, method: str, path: str, body: Any) -> Any:
        core = self._core
        for attempt in range(core.max_retries + 1):
            response = None
            try:
                response = await self._http.request(method, core.base_url + path, json=body, headers=core.headers,
                                                    timeout=core.timeout)
            except httpx.TimeoutException:
                raise APITimeoutError(f"{method} {path}: no answer within the {core.timeout:g} s timeout") from None
            except httpx.TransportError as error:
                if attempt == core.max_retries:
                    raise APIConnectionError(f"{method} {path}: {error!r}") from error
            if response is not None and (not core.retryable(response) or attempt == core.max_retries):
                return core.result(response)
            await anyio.sleep(core.delay(attempt, response))
        raise AssertionError("unreachable: the last attempt returns or raises")


@contextmanager
def _total_timeout(seconds: float) -> Iterator[None]:
    """One call's total deadline over every attempt and wait; raises APITimeoutError when spent."""
    try:
        with anyio.fail_after(seconds):
            yield
    except TimeoutError:
        raise APITimeoutError(f"no answer within the {seconds:g} s timeout") from None
