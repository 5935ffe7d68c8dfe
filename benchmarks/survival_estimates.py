"""Whether the drafter's survival estimates tell which drafts will hold, on the subject lines it serves.

The load-aware scheduler verifies a draft when the drafter's (calibrated) survival estimate says it
pays. That helps only if the estimates discriminate: drafts estimated higher must hold more often.
This decodes the subject lines of the first `--prompts` test mails one at a time with one draft a
round (k = 1, every draft verified), records each round's estimate for its draft and whether the
accept rule kept it, and reports, per band of estimates, how many rounds fell there and how often
their draft held, beside the mean estimate and the mean outcome over all rounds.

    python -m benchmarks.survival_estimates --model models/default
"""

import argparse
from itertools import pairwise
from pathlib import Path

import torch

from benchmarks.report import write_results
from benchmarks.speculative import subject_prompts
from jev.command import add_weights_option
from jev.decide.decider import Decider
from jev.generate.drafters import load_drafter
from jev.generate.loop import TargetState, generate
from jev.generate.scheduler import FixedLength

BANDS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.6, 1.0)


class RecordingLength(FixedLength):
    """k drafts every round, all verified; remembers each round's first estimate and its outcome."""

    def __init__(self) -> None:
        self.rounds: list[tuple[float, int]] = []
        self._estimates: list[float] = []

    def verify_lengths(self, survival: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        self._estimates = survival[active, 0].tolist()
        return super().verify_lengths(survival, active)

    def record(self, n_verified: torch.Tensor, n_accepted: torch.Tensor) -> None:
        self.rounds += list(zip(self._estimates, n_accepted[n_verified > 0].tolist(), strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, default=Path("data/mail/test.jsonl"))
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.0])
    add_weights_option(parser)
    parser.add_argument("--no-write", action="store_true", help="print only; leave results and docs alone")
    args = parser.parse_args()

    decider = Decider.load(args.model, check_policies=False, speculative=False, weights=args.weights)
    model = decider.model
    prompts, stop = subject_prompts(decider, args.data, args.prompts)
    drafter = load_drafter(args.model / "drafter", model)
    results, lines = {}, []
    for temperature in args.temperatures:
        policy = RecordingLength()
        with torch.no_grad():
            for prompt in prompts:
                state = TargetState.prefill(model, [prompt], len(prompt) + 34)
                generate(model, [prompt], 32, temperature=temperature, seed=0, drafter=drafter, draft_len=1,
                         policy=policy, stop=stop, state=state)
        estimates = torch.tensor([e for e, _ in policy.rounds], dtype=torch.float64)
        held = torch.tensor([h for _, h in policy.rounds], dtype=torch.float64)
        groups = {f"{low:g}-{high:g}": (estimates >= low) & ((estimates < high) | (high == BANDS[-1]))
                  for low, high in pairwise(BANDS)}
        groups["all"] = torch.ones_like(held, dtype=torch.bool)
        summary = {
            label: {"rounds": int(inside.sum()), "mean_estimate": float(estimates[inside].mean()),
                    "held": float(held[inside].mean())}
            for label, inside in groups.items() if bool(inside.any())
        }
        results[f"{temperature:g}"] = summary
        lines += [f"| {temperature:g} | {label} | {r['rounds']} | {r['mean_estimate']:.3f} | {r['held']:.2f} |"
                  for label, r in summary.items()]
    markdown = (
        f"`{args.model}` ({model.weights} weights) and its drafter, one draft a round, every draft verified: "
        f"the subject lines of the first {args.prompts} test mails, one at a time. Per band of the drafter's "
        "calibrated survival estimate: rounds, their mean estimate, and how often their draft held.\n\n"
        "| T | estimate band | rounds | mean estimate | held |\n|---|---|---|---|---|\n" + "\n".join(lines)
    )
    print(markdown)
    if not args.no_write:
        write_results("survival_estimates", results, markdown)


if __name__ == "__main__":
    main()
