"""What a load-aware round that drafts nothing costs, against a plain decoding step, in one run.

    python -m benchmarks.scheduler_overhead --model models/default

Greedy subject lines of the first test mails, `--batches` of them at once, `--runs` times each,
alternating: plain decoding, and the shipped drafter under a load-aware scheduler forced to draft
nothing, on the weights and replayed passes `jev serve` uses. Both write the same text in the same
number of passes, so any difference is the scheduler's and the drafter's bookkeeping per round (or
the machine's drift between runs, which the alternation spreads over both).
"""

import argparse
import functools
import statistics
import time
from pathlib import Path

import torch

from benchmarks.report import write_results
from benchmarks.speculative import subject_prompts
from jev import Decider
from jev.generate.drafters import Drafter, load_drafter
from jev.generate.loop import TargetState, generate
from jev.generate.scheduler import LoadAwareScheduler, VerifyProfile
from jev.model import Model

DRAFT_LEN = 7
NEW_TOKENS = 32


class NeverDrafting(LoadAwareScheduler):
    """Does all of the scheduler's per-round work, then drafts nothing."""

    def draft_depth(self, active: torch.Tensor, draft_len: int) -> int:
        super().draft_depth(active, draft_len)
        return 0


def seconds(
    target: Model, prompts: list[list[int]], stop: frozenset[int], drafter: Drafter, policy: LoadAwareScheduler | None
) -> tuple[float, int]:
    """Wall time of one greedy generation after its prompts are read, plainly or under `policy`."""
    with torch.no_grad():  # as `generate` runs: a cache made in inference mode is read-only outside it
        state = TargetState.prefill(target, prompts, max(map(len, prompts)) + NEW_TOKENS + DRAFT_LEN + 1)
    started = time.perf_counter()
    out = generate(
        target, prompts, NEW_TOKENS, temperature=0.0, drafter=drafter if policy else None,
        draft_len=DRAFT_LEN, policy=policy, stop=stop, state=state,
    )
    return time.perf_counter() - started, out.stats.target_passes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, default=Path("data/mail/test.jsonl"))
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16],
                        help="sequences decoded together, one table row pair each (default: %(default)s)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each (default: %(default)s)")
    args = parser.parse_args(argv)
    decider = Decider.load(args.model, check_policies=False, speculative=False, weights="auto", replay=True)
    target = decider.model
    drafter = load_drafter(args.model / "drafter", target)
    lines = [f"Greedy subject lines of the first test mails, {target.weights} weights, {args.runs} runs each, "
             "alternating.", "", "| sequences | decoding | seconds per run | mean | against plain | target passes |",
             "|---|---|---|---|---|---|"]
    raw = {}
    for batch in args.batches:
        prompts, stop = subject_prompts(decider, args.data, batch)
        profile = VerifyProfile.measure(target, [batch], context=64, width=DRAFT_LEN + 1)

        run = functools.partial(seconds, target, prompts, stop, drafter)
        run(None)  # warm-up
        times: dict[str, list[float]] = {"plain": [], "never-drafting scheduler": []}
        passes: dict[str, int] = {}
        for _ in range(args.runs):
            for name, policy in (("plain", None), ("never-drafting scheduler", NeverDrafting(profile))):
                took, passes[name] = run(policy)
                times[name].append(took)
        plain = statistics.mean(times["plain"])
        lines += [f"| {batch} | {name} | {', '.join(f'{t:.2f}' for t in runs)} | {statistics.mean(runs):.2f} | "
                  f"{statistics.mean(runs) / plain:.3f} | {passes[name]} |" for name, runs in times.items()]
        raw[str(batch)] = {"seconds": times, "target_passes": passes}
    markdown = "\n".join(lines)
    print(markdown)
    write_results("scheduler_overhead", raw, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
