"""Serving benchmark: decisions/s, text tokens/s and p50/p99 latency of `jev serve` over loopback.

    python -m benchmarks.serve --model models/default --data data/mail/test.jsonl [--requests 128]
        [--concurrency 1,8,32]

For each concurrency, async clients send a fixed number of `POST /v1/decide/{task}` requests to a
real server process, each the next test row's input in turn (so texts of every length share a
batch). Three servers: dynamic batching on (max_batch 32, max_wait 5 ms) with the model's drafter
and load-aware scheduler, as `jev serve` starts; the same with `--no-speculative`; and batching off
(max_batch 1). This machine's verify profile is measured first (`jev profile`, as `make serve`
does) into a cache folder of the benchmark's own, so no server measures it while it serves. Two
references frame the numbers: a trivial litestar endpoint under the same uvicorn (the HTTP
ceiling of this machine) and the engine called directly on 32 rows at once (the model's ceiling),
whose ratio to the served rate is the HTTP layer's share. `--no-write` prints without touching
the docs.
"""

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SERVERS = {  # name: the flags `jev serve` gets beside --model and --port
    "batching, speculative": ["--max-batch", "32", "--max-wait-ms", "5"],
    "batching, plain": ["--max-batch", "32", "--max-wait-ms", "5", "--no-speculative"],
    "no batching, speculative": ["--max-batch", "1", "--max-wait-ms", "0"],
}


def main() -> None:
    args = parse_args()
    if args.trivial_port:
        serve_trivial(args.trivial_port)
        return
    from jev.decide.decider import Decider

    inputs = [json.loads(line)["input"] for line in args.data.open()]
    # A cache folder of its own, where the profile is measured as `make serve` measures it, alone.
    os.environ["JEV_CACHE_DIR"] = tempfile.mkdtemp(prefix="jev-serve-benchmark-")
    model = args.model.resolve()  # the child processes run in the checkout, wherever this one was started
    subprocess.run([sys.executable, "-m", "jev.cli", "profile", "--model", str(model)], cwd=ROOT, check=True)
    decider = Decider.load(model, weights="auto", replay=True)
    results: dict[str, Any] = {"model": str(args.model), "task": args.task, "data": str(args.data),
                               "requests": args.requests, "runs": []}
    results["engine_batch32"] = engine_rate(decider, args.task, inputs[:32], args.engine_passes)
    del decider
    levels = [int(c) for c in args.concurrency.split(",")]
    path = f"/v1/decide/{args.task}"
    for name, flags in SERVERS.items():
        with server(["-m", "jev.serve.cli", "--model", str(model), "--log-level", "warning", *flags],
                    "--port") as base:
            for c in levels:
                results["runs"].append({"server": name, "concurrency": c,
                                        **load(base, path, inputs, c, args.requests)})
    with server([str(Path(__file__).resolve())], "--trivial-port") as base:
        for c in levels:
            results["runs"].append({"server": "trivial", "concurrency": c,
                                    **load(base, "/echo", inputs, c, args.requests)})
    markdown = table(results)
    print(markdown)
    if not args.no_write:
        from benchmarks.report import write_results

        write_results("serve", results, markdown)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--task", default="mail", help="task to decide (default: mail)")
    parser.add_argument("--data", type=Path, default=Path("data/mail/test.jsonl"),
                        help="JSONL rows whose inputs the requests send, in turn")
    parser.add_argument("--requests", type=int, default=128, help="requests per run")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--engine-passes", type=int, default=3, help="passes over 32 rows for the engine rate")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs and results alone")
    parser.add_argument("--trivial-port", type=int, help=argparse.SUPPRESS)
    return parser.parse_args()


def engine_rate(decider: Any, name: str, inputs: list[dict[str, Any]], passes: int) -> dict[str, float]:
    """Decisions/s of the engine alone: the rows encoded once, decided together `passes` times."""
    task = decider.tasks[name]
    batch = [decider.encode(task, data) for data in inputs]
    decider.decide_encoded(task, batch)
    start = time.perf_counter()
    for _ in range(passes):
        decider.decide_encoded(task, batch)
    seconds = time.perf_counter() - start
    return {"decisions_per_s": len(batch) * passes / seconds, "ms_per_pass": 1e3 * seconds / passes}


def load(base: str, path: str, inputs: list[dict[str, Any]], concurrency: int, total: int) -> dict[str, float]:
    """`total` POSTs by `concurrency` clients, each the next of `inputs`; decisions/s and text tokens/s over
    the wall time, latency percentiles, and the drafted tokens' mean accepted length the answers report."""

    async def run() -> tuple[list[float], list[dict[str, Any]], float, int]:
        latencies: list[float] = []
        usages: list[dict[str, Any]] = []
        failures = 0
        sent = 0

        async def client() -> None:
            nonlocal sent, failures
            async with httpx.AsyncClient(base_url=base, timeout=120) as http:
                while sent < total:
                    body = {"input": inputs[sent % len(inputs)]}
                    sent += 1
                    start = time.perf_counter()
                    response = await http.post(path, json=body)
                    latencies.append(time.perf_counter() - start)
                    failures += response.status_code != 200
                    usages.append(response.json().get("usage", {}) if response.status_code == 200 else {})

        start = time.perf_counter()
        await asyncio.gather(*[client() for _ in range(concurrency)])
        return latencies, usages, time.perf_counter() - start, failures

    latencies, usages, seconds, failures = asyncio.run(run())
    latencies.sort()
    accepted = [u["accepted_length"] for u in usages if u.get("generation_passes")]
    return {
        "decisions_per_s": len(latencies) / seconds,
        "text_tokens_per_s": sum(u.get("generated_tokens", 0) for u in usages) / seconds,
        "accepted_length": statistics.mean(accepted) if accepted else 0.0,
        "p50_ms": 1e3 * statistics.median(latencies),
        "p99_ms": 1e3 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "failures": failures,
    }


class server:
    """A child process serving on a free loopback port until the `with` block ends."""

    def __init__(self, command: list[str], port_flag: str) -> None:
        self.port = free_port()
        self.command = [sys.executable, *command, port_flag, str(self.port)]

    def __enter__(self) -> str:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(self.command, cwd=ROOT, env=env)
        base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"the server exited with {self.process.returncode}")
            try:
                if httpx.get(base + "/health/ready", timeout=1).status_code == 200:
                    return base
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise SystemExit("the server never became ready")

    def __exit__(self, *exc: object) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def serve_trivial(port: int) -> None:
    """The HTTP ceiling: a litestar endpoint that decodes the same body and answers at once."""
    import uvicorn
    from litestar import Litestar, get, post

    @post("/echo", status_code=200)
    async def echo(data: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True}

    @get("/health/ready")
    async def ready() -> dict[str, str]:
        return {"status": "ready"}

    uvicorn.run(Litestar([echo, ready]), host="127.0.0.1", port=port, log_level="warning")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def table(results: dict[str, Any]) -> str:
    engine = results["engine_batch32"]["decisions_per_s"]
    lines = [
        f"Task `{results['task']}` (closed fields and the subject line), {results['requests']} requests per row, "
        f"the inputs of `{results['data']}` in turn. Engine alone on the first 32 at once: {engine:.1f} "
        f"decisions/s ({results['engine_batch32']['ms_per_pass']:.0f} ms per pass). Accepted length: tokens "
        "per target pass writing the text, the mean over the answers (`usage.accepted_length`).",
        "",
        "| server | concurrency | decisions/s | text tokens/s | accepted length | p50 ms | p99 ms "
        "| share of engine rate | failures |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in results["runs"]:
        served = run["server"] != "trivial"
        share = f"{100 * run['decisions_per_s'] / engine:.0f}%" if served else "-"
        text = (f"{run['text_tokens_per_s']:.1f} | {run['accepted_length']:.2f}" if served else "- | -")
        lines.append(
            f"| {run['server']} | {run['concurrency']} | {run['decisions_per_s']:.1f} | {text} | "
            f"{run['p50_ms']:.0f} | {run['p99_ms']:.0f} | {share} | {run['failures']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
