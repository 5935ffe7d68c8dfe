"""What the load-aware scheduler's own work costs a round, in one run.

    python -m benchmarks.scheduler_overhead --model models/default

Greedy subject lines of the first test mails, `--batches` of them at once, `--runs` times each,
alternating, on the weights and replayed passes `jev serve` uses, in two pairs:
- plain decoding, and the shipped drafter under a load-aware scheduler forced to draft nothing;
- one draft a round (`FixedLength`), and the scheduler forced to draft and verify one a round.
Each pair writes the same text in the same number of passes, so any difference is the scheduler's
bookkeeping per round, plus, in the first pair, the drafter's (or the machine's drift between runs,
which the alternation spreads over both).
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
from jev.generate.scheduler import FixedLength, LoadAwareScheduler, VerifyPolicy, VerifyProfile
from jev.model import Model

DRAFT_LEN = 7
NEW_TOKENS = 32


class NeverDrafting(LoadAwareScheduler):
    """Does all of the scheduler's per-round work, then drafts nothing."""

    def draft_depth(self, active: torch.Tensor, draft_len: int) -> int:
        super().draft_depth(active, draft_len)
        return 0


class AlwaysOne(LoadAwareScheduler):
    """Does all of the scheduler's per-round work (weighing depths up to DRAFT_LEN), then drafts and
    verifies one token a round."""

    def draft_depth(self, active: torch.Tensor, draft_len: int) -> int:
        super().draft_depth(active, DRAFT_LEN)
        return 1

    def verify_lengths(self, survival: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        super().verify_lengths(survival, active)
        return active.to(torch.int64)


def seconds(
    target: Model,
    prompts: list[list[int]],
    stop: frozenset[int],
    drafter: Drafter,
    policy: VerifyPolicy | None,
    draft_len: int = DRAFT_LEN,
) -> tuple[float, int]:
    """Wall time of one greedy generation after its prompts are read, plainly or under `policy`."""
    with torch.inference_mode():  # as `jev serve` writes text fields (`Decider`)
        state = TargetState.prefill(target, prompts, max(map(len, prompts)) + NEW_TOKENS + DRAFT_LEN + 1)
        started = time.perf_counter()
        out = generate(
            target, prompts, NEW_TOKENS, temperature=0.0, drafter=drafter if policy else None,
            draft_len=draft_len, policy=policy, stop=stop, state=state,
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
             "alternating.", "",
             "| sequences | decoding | seconds per run | mean | against the pair's first | target passes |",
             "|---|---|---|---|---|---|"]
    raw = {}
    for batch in args.batches:
        prompts, stop = subject_prompts(decider, args.data, batch)
        profile = VerifyProfile.measure(target, [batch], context=64, width=DRAFT_LEN + 1)

        run = functools.partial(seconds, target, prompts, stop, drafter)
        run(None)  # warm-up
        pairs = {
            "plain": {"plain": (lambda: None, DRAFT_LEN),
                      "never-drafting scheduler": (functools.partial(NeverDrafting, profile), DRAFT_LEN)},
            "k=1": {"k=1": (FixedLength, 1), "scheduler drafting one": (functools.partial(AlwaysOne, profile), 1)},
        }
        times: dict[str, list[float]] = {name: [] for pair in pairs.values() for name in pair}
        passes: dict[str, int] = {}
        for _ in range(args.runs):
            for pair in pairs.values():
                for name, (policy, draft_len) in pair.items():
                    took, passes[name] = run(policy(), draft_len)
                    times[name].append(took)
        for base, pair in pairs.items():
            against = statistics.mean(times[base])
            lines += [f"| {batch} | {name} | {', '.join(f'{t:.2f}' for t in times[name])} | "
                      f"{statistics.mean(times[name]):.2f} | {statistics.mean(times[name]) / against:.3f} | "
                      f"{passes[name]} |" for name in pair]
        raw[str(batch)] = {"seconds": times, "target_passes": passes}
    markdown = "\n".join(lines)
    print(markdown)
    write_results("scheduler_overhead", raw, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
