"""What each change to the bfloat16 decision pass buys, measured in one run: the median test mail's
decision (`benchmarks.decision_cost`'s input) on `mixed` weights as shipped, and with each change put
back as it was, alone and together:

- the attention: SDPA's fused kernel (values padded to the keys' width) in place of
  `jev.model.mla.causal_attention_bfloat16`;
- the MLP: the gate and up products on their own, with the activation and the product as passes of
  their own, in place of `jev.model.weights.Bf16Gated` (the products' epilogues).

Each variant is timed at batch 1 and per row at batch 32, in turn, round after round (the median is
kept), with the same thread count.

    python -m benchmarks.decision_pass --model models/default --data data/mail/test.jsonl
"""

import argparse
import statistics
from collections.abc import Callable
from functools import partial
from pathlib import Path

from benchmarks.decision_cost import median_mail
from benchmarks.prefill_attention import sdpa
from benchmarks.report import median_time, write_results
from jev.decide.decider import Decider
from jev.model import mla
from jev.model.mlp import MLP

VARIANTS = {
    "shipped": (True, True),
    "attention through SDPA": (False, True),
    "MLP unfused": (True, False),
    "both as before": (False, False),
}


def configure(decider: Decider, explicit_attention: bool, gated_mlp: bool) -> Callable[[], None]:
    """Put the decider's pass in one variant; returns what puts it back as shipped."""
    shipped = mla.causal_attention_bfloat16
    mlps = [module for module in decider.model.modules() if isinstance(module, MLP)]
    gated = [mlp.gated for mlp in mlps]
    if not explicit_attention:
        mla.causal_attention_bfloat16 = sdpa
    if not gated_mlp:
        for mlp in mlps:
            mlp.gated = None

    def restore() -> None:
        mla.causal_attention_bfloat16 = shipped
        for mlp, fused in zip(mlps, gated, strict=True):
            mlp.gated = fused

    return restore


def timed(model: Path, data: Path, rounds: int, repeats: int) -> dict[str, dict[str, float]]:
    """Milliseconds per decision of the median test mail in each variant, at batch 1 and 32."""
    decider = Decider.load(model, speculative=False, weights="mixed")
    task = decider.tasks["mail"]
    ids = decider.encode(task, median_mail(data, decider)).token_ids
    times: dict[str, dict[int, list[float]]] = {name: {1: [], 32: []} for name in VARIANTS}
    for _ in range(rounds):
        for name, (explicit_attention, gated_mlp) in VARIANTS.items():
            restore = configure(decider, explicit_attention, gated_mlp)
            try:
                for batch, calls in ((1, repeats), (32, 1)):
                    seconds = median_time(partial(decider.probabilities, task, [ids] * batch), calls)
                    times[name][batch].append(1e3 * seconds / batch)
            finally:
                restore()
    return {
        name: {f"batch_{batch}_ms": statistics.median(t) for batch, t in by_batch.items()}
        for name, by_batch in times.items()
    }


def render(results: dict[str, dict[str, float]], tokens: int) -> str:
    before = results["both as before"]
    lines = [
        f"The median test mail ({tokens} tokens), `mixed` weights. Milliseconds per row, and the ratio to "
        "the pass as it was before both changes.",
        "",
        "| decision pass | batch 1 | per row at batch 32 |",
        "|---|---|---|",
    ]
    for name, row in results.items():
        cells = [f"{row[key]:.1f} ({row[key] / before[key]:.2f}x)" for key in ("batch_1_ms", "batch_32_ms")]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, default=Path("data/mail/test.jsonl"), help="the mail test split")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5, help="timed calls at batch 1 per variant and round")
    parser.add_argument("--no-write", action="store_true", help="print only; leave results and docs alone")
    args = parser.parse_args()
    results = timed(args.model, args.data, args.rounds, args.repeats)
    decider = Decider.load(args.model, speculative=False)
    tokens = len(decider.encode(decider.tasks["mail"], median_mail(args.data, decider)).token_ids)
    markdown = render(results, tokens)
    print(markdown)
    if not args.no_write:
        write_results("decision_pass", {"variants": results, "tokens": tokens}, markdown)


if __name__ == "__main__":
    main()
