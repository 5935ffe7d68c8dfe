"""Shared plumbing for benchmarks: the machine's description and a marked section in docs/benchmarks.md.

Each benchmark owns one section between `<!-- name:start -->` and `<!-- name:end -->`, so running
one benchmark rewrites its own table and leaves the others alone.
"""

import datetime
import json
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from jev.generate.profiles import processor_name

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
INTRO = "# Benchmarks\n\nEvery number here was printed by a script in `benchmarks/`, with the command shown.\n"


def machine() -> str:
    return f"{processor_name()}, {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads"


def command() -> str:
    """How to rerun the benchmark from the repository root (benchmarks run as modules of `benchmarks`)."""
    module = "benchmarks." + Path(sys.argv[0]).stem
    return " ".join(["python -m", module, *(shlex.quote(arg) for arg in sys.argv[1:])])


def write_results(name: str, results: dict, markdown: str) -> None:
    """Save the raw numbers as JSON and replace this benchmark's section of docs/benchmarks.md."""
    stamp = datetime.date.today().isoformat()
    header = f"Measured {stamp} on {machine()}.\nCommand: `{command()}`\n\n"
    out = ROOT / "benchmarks" / "results" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": stamp, "machine": machine(), "command": command(), **results}, indent=2) + "\n")
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    section = f"{start}\n{header}{markdown.strip()}\n{end}"
    text = DOC.read_text() if DOC.exists() else INTRO
    if start in text:
        before, rest = text.split(start, 1)
        text = before + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    DOC.write_text(text)
    print(f"wrote {out.relative_to(ROOT)} and the '{name}' section of {DOC.relative_to(ROOT)}")


def median_time(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median seconds of `repeats` calls of `fn`, after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
