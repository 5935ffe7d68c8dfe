"""A fresh process's first decision with a text field, against its warm ones: what a new user waits for.

Each case runs in a new Python process. It loads `--model` as `jev serve` does (`--weights auto`,
its decode steps replayed as traced graphs, traced while it loads),
decides the first test mail (closed fields and the subject line) and times it, then decides the
same mail `--warm` more times and takes their median. Cases:

- `stored`: this machine's verify profile is already in the cache folder (`jev profile`, which
  `make serve` runs, stored it);
- `unmeasured`: an empty cache folder, so the profile is measured in the background meanwhile;
- `plain`: `--no-speculative`, no drafter.

Reported: load time, first and warm wall time, their ratio, the first decision's `usage.compute_ms`
beside its wall time (profiling must never be counted as compute), and how long `jev profile` ran.

    python -m benchmarks.first_decision --model models/default --data data/mail/test.jsonl
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.report import write_results

CASES = ("stored", "unmeasured", "plain")


def child(model: Path, data: Path, warm: int, speculative: bool) -> dict[str, Any]:
    """Runs in the fresh process: load, the first decision, then `warm` more."""
    from jev.decide.decider import Decider

    row = json.loads(next(iter(data.open())))["input"]
    started = time.perf_counter()
    decider = Decider.load(model, speculative=speculative, weights="auto", replay=True)  # as `jev serve`
    loaded = time.perf_counter() - started
    timings, compute = [], []
    for _ in range(warm + 1):
        started = time.perf_counter()
        result = decider.decide("mail", row)
        timings.append(time.perf_counter() - started)
        compute.append(result.usage.compute_ms)
    profiling = decider.profiling
    return {
        "load_s": loaded,
        "first_s": timings[0],
        "first_compute_ms": compute[0],
        "warm_s": statistics.median(timings[1:]),
        "speculative_after_first": decider.policy is not None,
        "profiled_in_background": profiling is not None,
        "profile_done": profiling is None or profiling.profile is not None,
    }


def run_case(case: str, model: Path, data: Path, warm: int, cache: Path) -> dict[str, Any]:
    argv = [sys.executable, "-m", "benchmarks.first_decision", "--child", "--model", str(model),
            "--data", str(data), "--warm", str(warm)]
    if case == "plain":
        argv.append("--no-speculative")
    env_cache = cache if case != "unmeasured" else Path(tempfile.mkdtemp(prefix="jev-cache-"))
    done = subprocess.run(
        argv, capture_output=True, text=True, check=True, env={**os.environ, "JEV_CACHE_DIR": str(env_cache)}
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, default=Path("data/mail/test.jsonl"))
    parser.add_argument("--warm", type=int, default=5, help="warm decisions after the first")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-speculative", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-write", action="store_true", help="print only; leave results and docs alone")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.model, args.data, args.warm, not args.no_speculative)))
        return
    cache = Path(tempfile.mkdtemp(prefix="jev-cache-"))
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "jev.cli", "profile", "--model", str(args.model)],
        check=True, env={**os.environ, "JEV_CACHE_DIR": str(cache)},
    )
    profile_s = time.perf_counter() - started
    results = {case: run_case(case, args.model, args.data, args.warm, cache) for case in CASES}
    rows = [
        f"| {case} | {r['load_s']:.1f} | {r['first_s']:.2f} | {r['warm_s']:.2f} | {r['first_s'] / r['warm_s']:.2f} "
        f"| {r['first_compute_ms'] / 1e3:.2f} | {'yes' if r['speculative_after_first'] else 'no'} |"
        for case, r in results.items()
    ]
    markdown = (
        f"The first test mail (closed fields and the subject line), `{args.model}`: the first decision of a "
        f"fresh process, and the median of {args.warm} more of the same mail. `jev profile`, which stored the "
        f"profile for the first case, ran {profile_s:.1f} s, loading the model included.\n\n"
        "| case | load s | first s | warm s | first / warm | first compute_ms, s | drafting after the first |\n"
        "|---|---|---|---|---|---|---|\n" + "\n".join(rows)
    )
    print(markdown)
    if not args.no_write:
        settings = {k: str(v) for k, v in vars(args).items()}
        write_results("first_decision", {"settings": settings, "profile_s": profile_s, "runs": results}, markdown)


if __name__ == "__main__":
    main()
