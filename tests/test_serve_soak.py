"""A bounded soak over loopback: mixed valid and invalid requests against a real server process.

Every request gets exactly one answer, none is a 5xx, and the server's resident memory grows by
less than 10% after warm-up. `JEV_SOAK_SECONDS` sets the duration (default 30 s, as the service issue asks;
run longer before a release).
"""

import asyncio
import os
import random
import time
from pathlib import Path

import httpx
import pytest

from tests.serving import server_process, ticket, tiny_decider

pytestmark = pytest.mark.slow

SECONDS = float(os.environ.get("JEV_SOAK_SECONDS", "30"))
CONCURRENCY = 8


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def mixed_request(rng: random.Random) -> tuple[str, str, dict | bytes]:
    """(method, path, body): decisions, batches, bad JSON, bad fields, over-long input, unknown task, reads."""
    n = rng.randrange(1000)
    choices = [
        ("POST", "/v1/decide/ticket", {"input": ticket(f"refund {n}")}),
        ("POST", "/v1/decide/mail", {"input": {"body": f"win a cruise {n} " * rng.randint(1, 40)}}),
        ("POST", "/v1/decide/ticket/batch", {"inputs": [ticket(f"bug {n + i}") for i in range(rng.randint(1, 6))]}),
        ("POST", "/v1/decide/ticket", b'{"input": {"text": '),
        ("POST", "/v1/decide/ticket", {"input": {"text": n}}),
        ("POST", "/v1/decide/strict", {"input": {"text": "long " * 200}}),
        ("POST", "/v1/decide/nope", {"input": {}}),
        ("GET", "/v1/tasks/ticket", b""),
        ("GET", "/metrics", b""),
    ]
    return rng.choice(choices)


async def soak(base: str, pid: int, seconds: float) -> tuple[dict[int, int], int, int, int, int]:
    statuses: dict[int, int] = {}
    sent = answered = 0
    baseline = None
    end = time.monotonic() + seconds
    # The baseline after a third of the run: under `make test`'s parallel load the allocator was still
    # growing at 2 s (560 MB -> 625 MB once); a leak still shows over the last two thirds.
    warm_until = time.monotonic() + seconds / 3

    async def worker(seed: int) -> None:
        nonlocal sent, answered, baseline
        rng = random.Random(seed)
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            while time.monotonic() < end:
                method, path, body = mixed_request(rng)
                sent += 1
                if isinstance(body, dict):
                    response = await http.request(method, path, json=body)
                else:
                    response = await http.request(method, path, content=body or None,
                                                  headers={"content-type": "application/json"})
                answered += 1
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                if baseline is None and time.monotonic() > warm_until:
                    baseline = rss_kib(pid)

    await asyncio.gather(*[worker(seed) for seed in range(CONCURRENCY)])
    return statuses, sent, answered, baseline or rss_kib(pid), rss_kib(pid)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("soak")
    tiny_decider().save(folder)
    return folder


def test_soak_mixed_traffic(model_dir):
    with server_process(model_dir, "--max-batch", "8", "--max-wait-ms", "2") as (base, process):
        statuses, sent, answered, before, after = asyncio.run(soak(base, process.pid, SECONDS))
    assert sent == answered and sent > 0
    assert not [s for s in statuses if s >= 500], statuses
    assert set(statuses) <= {200, 400, 404, 422}, statuses
    assert statuses.get(200, 0) > 0 and statuses.get(422, 0) > 0
    assert after < 1.10 * before, f"resident memory grew from {before} KiB to {after} KiB"
