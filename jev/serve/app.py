"""The app factory: a decider folder (or a loaded Decider) in, a litestar app out.

    app = create_app("models/default")          # uvicorn.run(app)

The model loads in the factory; warm-up runs in the batcher's thread after start-up, so
`/health/live` answers at once and `/health/ready` turns 200 only when a pass has run per task.
On shutdown new decide requests get 503 while queued and running ones finish.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from litestar import Litestar
from litestar.di import Provide
from litestar.exceptions import HTTPException
from litestar.static_files import create_static_files_router

from jev.decide.decider import Decider
from jev.schema import JevError
from jev.serve.auth import api_key_guard
from jev.serve.docs import docs_assets, docs_config
from jev.serve.engine import Engine
from jev.serve.problems import ProblemError, handle_http, handle_internal, handle_jev, handle_problem
from jev.serve.routes import GENERIC_ROUTES, STATIC, decide_routes
from jev.serve.service import Service
from jev.serve.settings import ServeSettings

__all__ = ["create_app"]


def create_app(model: str | Path | Decider | Engine, settings: ServeSettings | None = None) -> Litestar:
    """Build the service for a decider folder, a Decider, or an Engine (tests wrap one).

    A folder loads apart (`jev.decide.decider.load_apart`). A Decider loaded on a thread that lives on
    (this one, say) leaves that thread's OpenMP team idle beside the batcher's, which then decides at
    about half speed on 2 cores: load it with `load_apart`, or pass the folder."""
    settings = settings or ServeSettings()
    engine = model if isinstance(model, Engine) else Engine(model) if isinstance(model, Decider) else Engine.load(model)
    service = Service(engine, settings)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        service.batcher.start()
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(service.batcher.close, settings.drain_timeout_s)

    routes = [route for wire in service.wires.values() for route in decide_routes(wire)]
    return Litestar(
        route_handlers=[
            *routes, *GENERIC_ROUTES,
            create_static_files_router("/static", [STATIC], opt={"public": True}, include_in_schema=False),
            docs_assets(),
        ],
        dependencies={"service": Provide(lambda: service, use_cache=True, sync_to_thread=False)},
        guards=[api_key_guard(settings.api_keys)] if settings.api_keys else [],
        middleware=[service.metrics.middleware],
        exception_handlers={
            ProblemError: handle_problem, HTTPException: handle_http, JevError: handle_jev, Exception: handle_internal,
        },
        lifespan=[lifespan],
        request_max_body_size=settings.max_body_bytes,
        openapi_config=docs_config("Jev decision service", "1"),
        state={
            "retry_after_s": settings.retry_after_s, "max_batch_inputs": settings.max_batch_inputs,
            "max_body_bytes": settings.max_body_bytes, "max_json_depth": settings.max_json_depth,
        },
        debug=False,
    )
