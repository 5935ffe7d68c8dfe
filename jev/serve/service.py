"""The state one app serves from: engine, compiled wire types, batcher, metrics and settings.

Built by the app factory and handed to routes as a dependency, so nothing lives at module level
and a test process can run many apps side by side.
"""

import asyncio
import time
from typing import Any

from jev.schema import InputTooLongError, InvalidInputError
from jev.serve.batcher import Batcher
from jev.serve.engine import Engine
from jev.serve.metrics import ServeMetrics
from jev.serve.problems import ProblemError, input_problem
from jev.serve.settings import ServeSettings
from jev.serve.wire import Problem, TaskWire


class Service:
    """Decides requests: encode each input now, queue it, await its batched pass under a deadline."""

    def __init__(self, engine: Engine, settings: ServeSettings) -> None:
        self.engine = engine
        self.settings = settings
        self.wires = {name: TaskWire.compile(task, settings.max_batch_inputs) for name, task in engine.tasks.items()}
        self.metrics = ServeMetrics(lambda: self.batcher.depth)
        self.batcher = Batcher(
            engine.run, settings.max_batch, settings.max_wait_ms, settings.max_queue,
            warm_up=engine.warm_up, on_batch=self.metrics.observe_batch,
        )
        self._ids = {
            task: {"name": engine.name, "model_id": engine.model_id, "calibrator_id": engine.calibrator_ids[task]}
            for task in engine.tasks
        }

    @property
    def ready(self) -> bool:
        return self.batcher.ready.is_set() and not self.batcher.closed

    def wire(self, task: str) -> TaskWire:
        if task not in self.wires:
            raise ProblemError(Problem(
                title="Unknown task", status=404,
                detail=f"no task {task!r}; this server decides {sorted(self.wires)}",
            ))
        return self.wires[task]

    async def decide(self, wire: TaskWire, inputs: list[dict[str, Any]], prefix: str) -> list[Any]:
        """Response Structs for `inputs`, in order; one field path prefix per input for errors."""
        deadline = time.perf_counter() + self.settings.request_timeout_s
        encoded = []
        for i, data in enumerate(inputs):
            try:
                encoded.append(self.engine.encode(wire.task, data))
            except (InvalidInputError, InputTooLongError) as error:
                raise input_problem(error, prefix.format(i=i)) from None
        futures = self.batcher.submit(wire.task, encoded, deadline)
        try:
            done = await asyncio.wait_for(asyncio.gather(*futures), self.settings.request_timeout_s)
        except TimeoutError:
            raise ProblemError(Problem(
                title="Deadline exceeded", status=504,
                detail=f"no answer within {self.settings.request_timeout_s:g} s; the work was dropped",
            )) from None
        ids = self._ids[wire.task.name]
        return [wire.answer(decided, queue_ms, ids) for decided, queue_ms in done]
