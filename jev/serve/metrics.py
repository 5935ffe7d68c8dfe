"""Prometheus metrics, in a registry owned by one app (tests build many apps in one process).

Queue time and compute time are kept apart because they call for different fixes: long queues
want more replicas or a bigger batch, long compute wants a faster model. Per-field confidence
histograms show a model drifting before anyone labels data.
"""

import time
from collections.abc import Callable

from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from jev.decide.kinds import kind_of
from jev.schema import Decided, FieldSpec
from jev.serve.batcher import BatchStats

_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_CONFIDENCE = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)


class ServeMetrics:
    """Every metric the service exports; `observe_batch` is called from the batcher's thread."""

    def __init__(self, queue_depth: Callable[[], int]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "jev_http_requests", "HTTP requests answered", ["method", "route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "jev_http_request_seconds", "Time to answer a request", ["route"], buckets=_SECONDS, registry=self.registry
        )
        self.queue = Histogram(
            "jev_queue_seconds", "Time an input waited before its pass", ["task"], buckets=_SECONDS,
            registry=self.registry,
        )
        self.compute = Histogram(
            "jev_compute_seconds", "Time of one batched forward pass", ["task"], buckets=_SECONDS,
            registry=self.registry,
        )
        self.batch = Histogram(
            "jev_batch_size", "Inputs decided per forward pass", ["task"], buckets=_BATCH, registry=self.registry
        )
        self.confidence = Histogram(
            "jev_field_confidence", "Top probability of each closed field's decision", ["task", "field"],
            buckets=_CONFIDENCE, registry=self.registry,
        )
        depth = Gauge("jev_queue_depth", "Inputs waiting for a pass", registry=self.registry)
        depth.set_function(lambda: float(queue_depth()))

    def observe_batch(self, stats: BatchStats) -> None:
        task = stats.task.name
        self.compute.labels(task).observe(stats.compute_s)
        self.batch.labels(task).observe(stats.size)
        for waited in stats.queue_s:
            self.queue.labels(task).observe(waited)
        fields = stats.task.spec.closed_fields
        for result in stats.results:
            for field in fields:
                self.confidence.labels(task, field.name).observe(_confidence(result, field))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def middleware(self, app: ASGIApp) -> ASGIApp:
        """Counts every answered request by its route template and status."""

        async def counted(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            start = time.perf_counter()
            route = scope.get("path_template") or "unmatched"
            status = [500]

            async def record(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status[0] = message["status"]
                await send(message)

            try:
                await app(scope, receive, record)
            finally:
                self.requests.labels(scope["method"], route, str(status[0])).inc()
                self.latency.labels(route).observe(time.perf_counter() - start)

        return counted


def _confidence(result: Decided, field: FieldSpec) -> float:
    """The policy's confidence when it reported one, else the top probability; for a multi-label
    field (independent labels) the least certain label's max(p, 1 - p)."""
    outcome = result.outcomes.get(field.name)
    if outcome is not None:
        return outcome.confidence
    return kind_of(field).confidence(result.probs[field.name])
