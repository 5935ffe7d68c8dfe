"""What each change to the bfloat16 decision pass buys, measured in one run: the median test mail's
decision (`benchmarks.decision_cost`'s input) on `mixed` weights as shipped, and with one change at a
time put back as it was:
- the attention in the other form: the explicit products (`jev.model.mla.explicit_causal_attention`)
  where this CPU takes SDPA's fused kernel (it has AMX), SDPA's kernel
  (`jev.model.mla.fused_causal_attention`) where it takes the explicit products;
- the last layer run for every row, its field rows picked afterwards, in place of the field rows
  alone (`Model.layer_states(read=...)`).

Each variant is timed at batch 1 and per row at batch 32, in turn, round after round (the median is
kept), with the same thread count.

    python -m benchmarks.decision_pass --model models/default --data data/mail/test.jsonl
"""

import argparse
import statistics
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

from benchmarks.decision_cost import median_mail
from benchmarks.report import median_time, write_results
from jev.decide.decider import Decider
from jev.model import Model, mla


def every_row(layer_states: Callable) -> Callable:
    """`Model.layer_states` that runs the last layer for every row and then picks the rows `read` names."""

    def run(self: Model, x: torch.Tensor, lengths: torch.Tensor, *, read: torch.Tensor | None = None, **kw):
        hidden = layer_states(self, x, lengths, **kw)
        return hidden if read is None else hidden[torch.arange(len(hidden)).unsqueeze(1), read]

    return run


# What each variant's pass runs: the attention, and the layers.
SHIPPED = (mla.causal_attention_bfloat16, Model.layer_states)
OTHER_ATTENTION = (
    ("attention as explicit products", mla.explicit_causal_attention)
    if SHIPPED[0] is mla.fused_causal_attention
    else ("attention through SDPA", mla.fused_causal_attention)
)
VARIANTS: dict[str, tuple[Callable, Callable]] = {
    "shipped": SHIPPED,
    OTHER_ATTENTION[0]: (OTHER_ATTENTION[1], SHIPPED[1]),
    "the last layer for every row": (SHIPPED[0], every_row(SHIPPED[1])),
}


def timed(model: Path, data: Path, rounds: int, repeats: int) -> tuple[dict[str, dict[str, float]], int]:
    """Milliseconds per decision of the median test mail in each variant, at batch 1 and 32, and the
    mail's length in tokens."""
    decider = Decider.load(model, speculative=False, weights="mixed")
    task = decider.tasks["mail"]
    ids = decider.encode(task, median_mail(data, decider)).token_ids
    times: dict[str, dict[int, list[float]]] = {name: {1: [], 32: []} for name in VARIANTS}
    try:
        for _ in range(rounds):
            for name, (attention, layer_states) in VARIANTS.items():
                mla.causal_attention_bfloat16, Model.layer_states = attention, layer_states
                for batch, calls in ((1, repeats), (32, 1)):
                    seconds = median_time(partial(decider.probabilities, task, [ids] * batch), calls)
                    times[name][batch].append(1e3 * seconds / batch)
    finally:
        mla.causal_attention_bfloat16, Model.layer_states = SHIPPED
    medians = {
        name: {f"batch_{batch}_ms": statistics.median(t) for batch, t in by_batch.items()}
        for name, by_batch in times.items()
    }
    return medians, len(ids)


def render(results: dict[str, dict[str, float]], tokens: int) -> str:
    shipped = results["shipped"]
    lines = [
        f"The median test mail ({tokens} tokens), `mixed` weights. Milliseconds per row, and the ratio to "
        "the shipped pass.",
        "",
        "| decision pass | batch 1 | per row at batch 32 |",
        "|---|---|---|",
    ]
    for name, row in results.items():
        cells = [f"{row[key]:.1f} ({row[key] / shipped[key]:.2f}x)" for key in ("batch_1_ms", "batch_32_ms")]
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
    results, tokens = timed(args.model, args.data, args.rounds, args.repeats)
    markdown = render(results, tokens)
    print(markdown)
    if not args.no_write:
        write_results("decision_pass", {"variants": results, "tokens": tokens}, markdown)


if __name__ == "__main__":
    main()
