"""Serving benchmark: decisions/s and p50/p99 latency of `jev serve` over loopback.

    python benchmarks/serve.py --model models/default [--requests 2000] [--concurrency 1,8,32,64]

For each concurrency, async clients send a fixed number of `POST /v1/decide/{task}` requests to a
real server process, with dynamic batching on (max_batch 32, max_wait 5 ms) and off (max_batch 1).
Two references frame the numbers: a trivial litestar endpoint under the same uvicorn (the HTTP
ceiling of this machine) and the engine called directly at batch 32 (the model's ceiling), whose
ratio to the served rate is the HTTP layer's share. `--no-write` prints without touching the docs.
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
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BATCHING = {"on": ("32", "5"), "off": ("1", "0")}


def main() -> None:
    args = parse_args()
    if args.trivial_port:
        serve_trivial(args.trivial_port)
        return
    from jev.decide.decider import Decider

    decider = Decider.load(args.model)
    task = decider.tasks[args.task or next(iter(decider.tasks))]
    data = json.loads(args.input) if args.input else sample_input(task.input_model.model_json_schema())
    levels = [int(c) for c in args.concurrency.split(",")]
    results: dict[str, Any] = {"model": str(args.model), "task": task.name, "requests": args.requests, "runs": []}
    results["engine_batch32"] = engine_rate(decider, task, data, args.engine_passes)
    del decider
    with server(["-m", "jev.serve.cli", "--model", str(args.model), "--log-level", "warning"], "--port",
                BATCHING["on"]) as base:
        for c in levels:
            results["runs"].append({"server": "jev", "batching": "on", "concurrency": c,
                                    **load(base, f"/v1/decide/{task.name}", {"input": data}, c, args.requests)})
    with server(["-m", "jev.serve.cli", "--model", str(args.model), "--log-level", "warning"], "--port",
                BATCHING["off"]) as base:
        for c in levels:
            results["runs"].append({"server": "jev", "batching": "off", "concurrency": c,
                                    **load(base, f"/v1/decide/{task.name}", {"input": data}, c, args.requests)})
    with server([str(Path(__file__).resolve())], "--trivial-port", None) as base:
        for c in levels:
            results["runs"].append({"server": "trivial", "batching": "-", "concurrency": c,
                                    **load(base, "/echo", {"input": data}, c, args.requests)})
    markdown = table(results)
    print(markdown)
    if not args.no_write:
        from benchmarks.report import write_results

        write_results("serve", results, markdown)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "default")
    parser.add_argument("--task", help="task to decide (default: the model's first)")
    parser.add_argument("--input", help="one input as JSON (default: every string field filled)")
    parser.add_argument("--requests", type=int, default=2000, help="requests per run")
    parser.add_argument("--concurrency", default="1,8,32,64")
    parser.add_argument("--engine-passes", type=int, default=20, help="batch-32 passes for the engine rate")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs and results alone")
    parser.add_argument("--trivial-port", type=int, help=argparse.SUPPRESS)
    return parser.parse_args()


def sample_input(schema: dict[str, Any]) -> dict[str, Any]:
    """A plausible input from the task's JSON Schema: every string property gets a sentence."""
    properties = schema.get("properties", {})
    data = {name: "Meeting moved to Tuesday; please confirm the new agenda by email." for name, p in properties.items()
            if p.get("type") == "string"}
    missing = [name for name in schema.get("required", []) if name not in data]
    if missing:
        raise SystemExit(f"cannot make up values for required fields {missing}; pass --input JSON")
    return data


def engine_rate(decider: Any, task: Any, data: dict[str, Any], passes: int) -> dict[str, float]:
    """Decisions/s of the engine alone: one input encoded once, decided 32 at a time."""
    batch = [decider.encode(task, data)] * 32
    decider.decide_encoded(task, batch)
    start = time.perf_counter()
    for _ in range(passes):
        decider.decide_encoded(task, batch)
    seconds = time.perf_counter() - start
    return {"decisions_per_s": 32 * passes / seconds, "ms_per_pass": 1e3 * seconds / passes}


def load(base: str, path: str, body: dict[str, Any], concurrency: int, total: int) -> dict[str, float]:
    """`total` POSTs by `concurrency` clients; decisions/s over the wall time, latency percentiles."""

    async def run() -> tuple[list[float], float, int]:
        latencies: list[float] = []
        failures = 0
        left = total

        async def client() -> None:
            nonlocal left, failures
            async with httpx.AsyncClient(base_url=base, timeout=60) as http:
                while left > 0:
                    left -= 1
                    start = time.perf_counter()
                    response = await http.post(path, json=body)
                    latencies.append(time.perf_counter() - start)
                    failures += response.status_code != 200

        start = time.perf_counter()
        await asyncio.gather(*[client() for _ in range(concurrency)])
        return latencies, time.perf_counter() - start, failures

    latencies, seconds, failures = asyncio.run(run())
    latencies.sort()
    return {
        "decisions_per_s": len(latencies) / seconds,
        "p50_ms": 1e3 * statistics.median(latencies),
        "p99_ms": 1e3 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "failures": failures,
    }


class server:
    """A child process serving on a free loopback port until the `with` block ends."""

    def __init__(self, command: list[str], port_flag: str, batching: tuple[str, str] | None) -> None:
        self.port = free_port()
        extra = ["--max-batch", batching[0], "--max-wait-ms", batching[1]] if batching else []
        self.command = [sys.executable, *command, port_flag, str(self.port), *extra]

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
        f"Task `{results['task']}`, {results['requests']} requests per row. Engine alone at batch 32: "
        f"{engine:.0f} decisions/s ({results['engine_batch32']['ms_per_pass']:.1f} ms per pass).",
        "",
        "| server | batching | concurrency | decisions/s | p50 ms | p99 ms | share of engine rate | failures |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for run in results["runs"]:
        share = f"{100 * run['decisions_per_s'] / engine:.0f}%" if run["server"] == "jev" else "-"
        lines.append(
            f"| {run['server']} | {run['batching']} | {run['concurrency']} | {run['decisions_per_s']:.0f} | "
            f"{run['p50_ms']:.1f} | {run['p99_ms']:.1f} | {share} | {run['failures']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
