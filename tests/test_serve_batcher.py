"""The batcher alone, with a fake engine: grouping, waiting, ordering, isolation, deadlines, shutdown."""

import asyncio
import threading
import time

import pytest

from jev.decide.decider import Encoded
from jev.serve.batcher import Batcher, DeadlinePassedError, QueueFullError, ShuttingDownError
from tests.serving import STRICT, TICKET


class FakeEngine:
    """Echoes each input's first token id; records the batches it ran; can be held at a gate."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, list[int]]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail_next = False

    def run(self, task, batch):
        self.gate.wait(10)
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("engine failure")
        self.batches.append((task.name, [e.token_ids[0] for e in batch]))
        return [(task.name, e.token_ids[0]) for e in batch]


def encoded(i: int) -> Encoded:
    return Encoded([i], truncated=False)


def run_batcher(engine: FakeEngine, body, **settings):
    """Start a batcher, run the coroutine `body(batcher)` on a fresh loop, close the batcher."""
    options = {"max_batch": 4, "max_wait_ms": 30, "max_queue": 64, **settings}
    batcher = Batcher(engine.run, **options)
    batcher.start()
    batcher.ready.wait(5)
    try:
        return asyncio.run(body(batcher))
    finally:
        engine.gate.set()
        batcher.close(5)


def far() -> float:
    return time.perf_counter() + 60


def test_requests_arriving_together_share_a_pass_and_keep_their_answers():
    engine = FakeEngine()

    async def body(batcher):
        futures = [batcher.submit(TICKET, [encoded(i)], far())[0] for i in range(10)]
        return [value for value, _queue_ms in await asyncio.gather(*futures)]

    answers = run_batcher(engine, body)
    assert answers == [("ticket", i) for i in range(10)]
    assert [len(ids) for _, ids in engine.batches] == [4, 4, 2]


def test_a_pass_is_counted_before_its_answers_leave():
    engine, seen = FakeEngine(), []

    def slow_count(stats) -> None:
        time.sleep(0.2)  # with answers sent first, the caller would read the metrics before this returns
        seen.append(stats.size)

    async def body(batcher):
        await asyncio.gather(*batcher.submit(TICKET, [encoded(1), encoded(2)], far()))
        return list(seen)

    assert run_batcher(engine, body, on_batch=slow_count) == [2]


def test_a_failing_pass_callback_still_delivers_the_answers():
    def broken(stats) -> None:
        raise RuntimeError("metrics down")

    async def body(batcher):
        first = await asyncio.gather(*batcher.submit(TICKET, [encoded(1)], far()))
        second = await asyncio.gather(*batcher.submit(TICKET, [encoded(2)], far()))
        return [value for value, _ in first + second]

    assert run_batcher(FakeEngine(), body, on_batch=broken) == [("ticket", 1), ("ticket", 2)]


def test_a_lone_request_waits_at_most_max_wait():
    engine = FakeEngine()

    async def body(batcher):
        start = time.perf_counter()
        (_, queue_ms), = await asyncio.gather(*batcher.submit(TICKET, [encoded(1)], far()))
        return time.perf_counter() - start, queue_ms

    elapsed, queue_ms = run_batcher(engine, body, max_wait_ms=50)
    assert 0.04 <= elapsed < 1.0 and queue_ms >= 40


def test_batching_off_runs_one_by_one():
    engine = FakeEngine()

    async def body(batcher):
        await asyncio.gather(*[batcher.submit(TICKET, [encoded(i)], far())[0] for i in range(5)])

    run_batcher(engine, body, max_batch=1, max_wait_ms=0)
    assert [len(ids) for _, ids in engine.batches] == [1] * 5


def test_tasks_never_share_a_pass():
    engine = FakeEngine()

    async def body(batcher):
        futures = [batcher.submit(TICKET if i % 2 else STRICT, [encoded(i)], far())[0] for i in range(8)]
        return [value for value, _ in await asyncio.gather(*futures)]

    answers = run_batcher(engine, body)
    assert answers == [("ticket" if i % 2 else "strict", i) for i in range(8)]
    assert sorted(engine.batches) == [("strict", [0, 2, 4, 6]), ("ticket", [1, 3, 5, 7])]


def test_an_engine_failure_fails_its_pass_only():
    engine = FakeEngine()

    async def body(batcher):
        engine.fail_next = True
        first = batcher.submit(TICKET, [encoded(1), encoded(2)], far())
        with pytest.raises(RuntimeError, match="engine failure"):
            await asyncio.gather(*first)
        return await batcher.submit(TICKET, [encoded(3)], far())[0]

    assert run_batcher(engine, body)[0] == ("ticket", 3)


def test_full_queue_refuses_all_or_nothing():
    engine = FakeEngine()
    engine.gate.clear()

    async def body(batcher):
        running = batcher.submit(TICKET, [encoded(0)], far())
        while batcher.depth:
            await asyncio.sleep(0.005)
        queued = batcher.submit(TICKET, [encoded(1), encoded(2)], far())
        with pytest.raises(QueueFullError):
            batcher.submit(TICKET, [encoded(3), encoded(4)], far())
        assert batcher.depth == 2
        engine.gate.set()
        return await asyncio.gather(*running, *queued)

    assert [v for v, _ in run_batcher(engine, body, max_batch=1, max_wait_ms=0, max_queue=3)] == [
        ("ticket", 0), ("ticket", 1), ("ticket", 2),
    ]


def test_expired_and_abandoned_work_is_dropped_unrun():
    engine = FakeEngine()
    engine.gate.clear()

    async def body(batcher):
        running = batcher.submit(TICKET, [encoded(0)], far())
        while batcher.depth:
            await asyncio.sleep(0.005)
        expired = batcher.submit(TICKET, [encoded(1)], time.perf_counter() + 0.01)
        abandoned = batcher.submit(TICKET, [encoded(2)], far())
        abandoned[0].cancel()
        await asyncio.sleep(0.05)
        engine.gate.set()
        await asyncio.gather(*running)
        with pytest.raises(DeadlinePassedError):
            await expired[0]

    run_batcher(engine, body, max_batch=1, max_wait_ms=0)
    assert engine.batches == [("ticket", [0])]


def test_close_refuses_new_work_and_finishes_queued_work():
    engine = FakeEngine()
    engine.gate.clear()

    async def body(batcher):
        queued = [batcher.submit(TICKET, [encoded(i)], far())[0] for i in range(3)]
        closing = asyncio.get_running_loop().run_in_executor(None, batcher.close, 5)
        while not batcher.closed:
            await asyncio.sleep(0.005)
        with pytest.raises(ShuttingDownError):
            batcher.submit(TICKET, [encoded(9)], far())
        engine.gate.set()
        assert await closing is True
        return [v for v, _ in await asyncio.gather(*queued)]

    assert run_batcher(engine, body, max_batch=1, max_wait_ms=0) == [("ticket", i) for i in range(3)]


def test_a_warm_up_failure_leaves_the_batcher_not_ready():
    def broken() -> None:
        raise RuntimeError("no weights")

    batcher = Batcher(FakeEngine().run, 4, 1, 8, warm_up=broken)
    batcher.start()
    batcher.close(5)
    assert not batcher.ready.is_set() and isinstance(batcher.failed, RuntimeError)
