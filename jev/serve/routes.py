"""The HTTP routes. Decide routes are made per task, so each documents and decodes its own Structs."""

from pathlib import Path
from typing import Any

import msgspec
from litestar import Response, get, post
from litestar.di import NamedDependency
from litestar.exceptions import ValidationException
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, JSONBody

from jev.serve.body import check_json_body
from jev.serve.problems import ProblemError, body_problem_handler
from jev.serve.service import Service
from jev.serve.wire import (
    CalibrationReport,
    Health,
    ModelDescription,
    ModelTask,
    Problem,
    TaskCalibrationReport,
    TaskDetail,
    TaskList,
    TaskWire,
)

STATIC = Path(__file__).resolve().parent / "static"
_PROBLEM = "application/problem+json"


def _problems(*statuses: int) -> dict[int, ResponseSpec]:
    return {
        status: ResponseSpec(Problem, description=description, media_type=_PROBLEM)
        for status, description in _DESCRIPTIONS.items()
        if status in statuses
    }


_DESCRIPTIONS = {
    400: "Malformed JSON, or JSON nested too deep", 401: "Missing or invalid API key", 404: "Unknown task",
    413: "Body too large", 415: "The body is not JSON", 422: "Input does not fit the task, or is too long",
    429: "Queue full (see Retry-After)", 503: "Not ready or shutting down", 504: "No answer before the deadline",
}
_DECIDE_ERRORS = _problems(400, 401, 404, 413, 415, 422, 429, 503, 504)


def decide_routes(wire: TaskWire) -> list[HTTPRouteHandler]:
    """`POST /v1/decide/{task}` and `/batch` for one task, with its Structs as body and answer."""
    name = wire.task.name

    async def decide(data: Any, service: NamedDependency[Service]) -> Any:
        (answer,) = await service.decide(wire, [msgspec.to_builtins(data.input)], "input.")
        return answer

    async def decide_batch(data: Any, service: NamedDependency[Service]) -> Any:
        inputs = [msgspec.to_builtins(item) for item in data.inputs]
        return wire.batch_response(results=await service.decide(wire, inputs, "inputs.{i}."))

    # litestar decodes `data` by the handler's annotations; these handlers are made per task at
    # runtime, so their annotations name the task's Structs here rather than in the source.
    service = NamedDependency[Service]
    decide.__annotations__ = {"data": JSONBody[wire.request], "service": service, "return": wire.response}
    decide_batch.__annotations__ = {
        "data": JSONBody[wire.batch_request], "service": service, "return": wire.batch_response,
    }
    common = dict(status_code=200, tags=["decide"], responses=_DECIDE_ERRORS, before_request=check_json_body)
    return [
        post(
            f"/v1/decide/{name}", operation_id=f"decide_{name}", summary=f"Decide one {name} input",
            description=wire.task.description or None,
            exception_handlers={ValidationException: body_problem_handler(wire.task, batch=False)}, **common,
        )(decide),
        post(
            f"/v1/decide/{name}/batch", operation_id=f"decide_{name}_batch", summary=f"Decide many {name} inputs",
            exception_handlers={ValidationException: body_problem_handler(wire.task, batch=True)}, **common,
        )(decide_batch),
    ]


@post("/v1/decide/{task:str}", include_in_schema=False)
async def unknown_task(task: FromPath[str], service: NamedDependency[Service]) -> None:
    service.wire(task)


@post("/v1/decide/{task:str}/batch", include_in_schema=False)
async def unknown_task_batch(task: FromPath[str], service: NamedDependency[Service]) -> None:
    service.wire(task)


@get("/v1/tasks", tags=["tasks"], responses=_problems(401))
async def list_tasks(service: NamedDependency[Service]) -> TaskList:
    """Every task this server decides, with its schema hash."""
    return TaskList([wire.summary() for wire in service.wires.values()])


@get("/v1/tasks/{task:str}", tags=["tasks"], responses=_problems(401, 404))
async def task_detail(task: FromPath[str], service: NamedDependency[Service]) -> TaskDetail:
    """One task: input and decision JSON Schemas, schema hash and layout, fields and their values."""
    wire = service.wire(task)
    return wire.detail(service.engine.max_input_tokens(wire.task))


@get("/v1/models", tags=["models"], responses=_problems(401))
async def models(service: NamedDependency[Service]) -> ModelDescription:
    """The loaded model: its id, each task's schema hash and calibration, and training provenance."""
    engine = service.engine
    manifest = engine.decider.manifest
    tasks = {
        name: ModelTask(e.reference, e.schema_hash, e.max_input_tokens, engine.calibrations.get(name) is not None,
                        engine.calibrator_ids.get(name), engine.calibrations.get(name))
        for name, e in manifest.tasks.items()
    }
    return ModelDescription(engine.name, engine.model_id, tasks, manifest.training)


@get("/v1/models/calibration", tags=["models"], responses=_problems(401))
async def calibration(service: NamedDependency[Service]) -> CalibrationReport:
    """Per task, the calibration metrics stored with the model; `calibrated: false` and empty when absent."""
    engine = service.engine
    tasks = {
        name: TaskCalibrationReport(engine.calibrations[name] is not None, engine.calibrator_ids[name],
                                    engine.calibrations[name], engine.calibration_metrics(name))
        for name in engine.tasks
    }
    return CalibrationReport(engine.model_id, any(t.calibrated for t in tasks.values()), tasks)


@get("/health/live", tags=["health"], opt={"public": True})
async def live() -> Health:
    """The process answers."""
    return Health("live")


@get("/health/ready", tags=["health"], opt={"public": True}, responses=_problems(503))
async def ready(service: NamedDependency[Service]) -> Health:
    """The model is loaded and warmed up, and the server is not shutting down."""
    if service.ready:
        return Health("ready")
    state = "failed" if service.batcher.failed else "draining" if service.batcher.closed else "warming up"
    raise ProblemError(Problem(title="Not ready", status=503, detail=f"the model is {state}"),
                       {"Retry-After": str(service.settings.retry_after_s)})


# litestar appends `; charset=utf-8` to text types itself; naming it here too sent it twice.
@get("/metrics", tags=["health"], media_type="text/plain; version=0.0.4")
async def metrics(service: NamedDependency[Service]) -> bytes:
    """Prometheus exposition of this app's registry."""
    return service.metrics.exposition()


@get("/", include_in_schema=False, opt={"public": True})
async def page() -> Response[bytes]:
    """The page for people: pick a task, fill its input, see every value's probability."""
    return Response((STATIC / "index.html").read_bytes(), media_type="text/html")


GENERIC_ROUTES = [unknown_task, unknown_task_batch, list_tasks, task_detail, models, calibration, live, ready,
                  metrics, page]
