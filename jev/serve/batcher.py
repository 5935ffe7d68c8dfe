"""Dynamic batching: requests wait in a queue and one worker thread decides them in groups.

A group is the oldest waiting request's task plus every later request of that task, up to
`max_batch`; it runs as soon as it is full or its oldest request has waited `max_wait_ms`. The
forward pass runs in the worker thread, so the event loop keeps serving while the model computes.
Inputs are already validated and encoded when they arrive here, so a batch can only fail as a
whole if the engine itself fails. Answers go back through each caller's own event loop.
"""

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jev.decide.decider import Encoded
from jev.schema import Decided, JevError, Task

_log = logging.getLogger(__name__)


class QueueFullError(JevError):
    """The queue has no room for the request's inputs; the caller should retry later."""


class ShuttingDownError(JevError):
    """The server is stopping: work already queued finishes, new work is refused."""


class DeadlinePassedError(JevError):
    """The request waited past its deadline and its work was dropped without running."""


@dataclass
class Job:
    """One encoded input waiting for its pass; `future` resolves to (Decided, queue_ms)."""

    task: Task
    encoded: Encoded
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    enqueued: float
    deadline: float


@dataclass
class BatchStats:
    """What one pass cost, for the metrics."""

    task: Task
    size: int
    queue_s: list[float]
    compute_s: float
    results: list[Decided]


class Batcher:
    """Queue plus worker thread. The worker runs `warm_up` first and sets `ready` when it is done."""

    def __init__(
        self,
        run: Callable[[Task, list[Encoded]], list[Decided]],
        max_batch: int,
        max_wait_ms: float,
        max_queue: int,
        warm_up: Callable[[], None] = lambda: None,
        on_batch: Callable[[BatchStats], None] = lambda stats: None,
    ) -> None:
        self._run = run
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1e3
        self.max_queue = max_queue
        self._warm_up = warm_up
        self._on_batch = on_batch
        self._jobs: list[Job] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()
        self.failed: BaseException | None = None

    @property
    def depth(self) -> int:
        return len(self._jobs)

    @property
    def closed(self) -> bool:
        return self._closed

    def start(self) -> None:
        """Start (or, after `close`, restart) the worker: an app's lifespan may run more than once."""
        with self._cond:
            if self._thread is not None and self._thread.is_alive():
                raise RuntimeError("the batcher is already running")
            self._closed = False
            self.failed = None
            self.ready.clear()
            self._thread = threading.Thread(target=self._work, name="jev-batcher", daemon=True)
            self._thread.start()

    def submit(self, task: Task, inputs: Sequence[Encoded], deadline: float) -> list[asyncio.Future]:
        """Queue inputs of one task together (all or none); call from the event loop."""
        loop = asyncio.get_running_loop()
        now = time.perf_counter()
        with self._cond:
            if self._closed:
                raise ShuttingDownError("the server is shutting down; retry on another replica")
            if len(self._jobs) + len(inputs) > self.max_queue:
                raise QueueFullError(
                    f"the queue holds {len(self._jobs)} of {self.max_queue} inputs; "
                    f"{len(inputs)} more do not fit"
                )
            jobs = [Job(task, item, loop.create_future(), loop, now, deadline) for item in inputs]
            self._jobs.extend(jobs)
            self._cond.notify()
        return [job.future for job in jobs]

    def close(self, timeout: float) -> bool:
        """Refuse new work, let queued work finish, and wait for the worker; True if it finished."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        return self._thread is None or not self._thread.is_alive()

    def _work(self) -> None:
        try:
            self._warm_up()
        except BaseException as error:  # a model that cannot run must show up as not ready, not hang
            self.failed = error
            self._fail_all(error)
            return
        self.ready.set()
        while (batch := self._take()) is not None:
            self._decide(batch)

    def _take(self) -> list[Job] | None:
        """The next group to run, or None once closed and empty."""
        with self._cond:
            while not self._jobs:
                if self._closed:
                    return None
                self._cond.wait()
            task = self._jobs[0].task
            until = self._jobs[0].enqueued + self.max_wait_s
            while not self._closed and self._count(task) < self.max_batch:
                left = until - time.perf_counter()
                if left <= 0:
                    break
                self._cond.wait(left)
            batch, rest = [], []
            for job in self._jobs:
                (batch if job.task is task and len(batch) < self.max_batch else rest).append(job)
            self._jobs = rest
            return batch

    def _count(self, task: Task) -> int:
        return sum(1 for job in self._jobs if job.task is task)

    def _decide(self, batch: list[Job]) -> None:
        start = time.perf_counter()
        live = []
        for job in batch:
            if job.future.done():
                continue  # the caller gave up (deadline or disconnect): drop its work
            if start > job.deadline:
                _settle(job, error=DeadlinePassedError("the request waited past its deadline"))
            else:
                live.append(job)
        if not live:
            return
        try:
            results = self._run(live[0].task, [job.encoded for job in live])
        except Exception as error:  # an engine failure fails this pass only; the worker keeps serving
            for job in live:
                _settle(job, error=error)
            return
        compute_s = time.perf_counter() - start
        queue_s = [start - job.enqueued for job in live]
        try:  # counted before any answer leaves, so a caller who has its answer sees it in the metrics
            self._on_batch(BatchStats(live[0].task, len(live), queue_s, compute_s, results))
        except Exception:  # a metrics failure must not lose the answers
            _log.exception("on_batch failed")
        for job, result, waited in zip(live, results, queue_s, strict=True):
            _settle(job, value=(result, 1e3 * waited))

    def _fail_all(self, error: BaseException) -> None:
        with self._cond:
            jobs, self._jobs, self._closed = self._jobs, [], True
        for job in jobs:
            _settle(job, error=error)


def _settle(job: Job, value: object = None, error: BaseException | None = None) -> None:
    """Resolve a job's future on its own loop; a loop already closed has nobody left to tell."""

    def resolve() -> None:
        if job.future.done():
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(value)

    with contextlib.suppress(RuntimeError):
        job.loop.call_soon_threadsafe(resolve)
