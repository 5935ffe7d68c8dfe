"""What a ragged verify pass costs: its tokens, or its rectangle (rows x the longest row)?

A verify pass extends each row of the target's cache by 1 + n_b tokens (the pending token and the
n_b drafts row b verifies); rows are right-padded to the longest, and rows that have finished
still hold their place. DSpark's Algorithm 1 sizes each row's n_b separately, which pays when a
pass costs its tokens; `jev.generate.scheduler.LoadAwareScheduler` gives every row the same width
because this table says Jev's pass costs its rectangle. Times are medians of cached passes after
`--context` positions, on the model's serving weights (`--weights`, default auto), replayed as traced
graphs where `jev serve` replays them (`jev.model.step_graphs`).

    python -m benchmarks.verify_pass --model models/default
"""

import argparse
from pathlib import Path

import torch

from benchmarks.report import median_time, write_results
from jev.command import add_weights_option
from jev.model import Model
from jev.model.weights import store_weights


def pass_seconds(model: Model, lengths: list[int], context: int, repeats: int) -> float:
    """Median seconds of one cached pass that extends row b by `lengths[b]` tokens (0: a finished row)."""
    rows = len(lengths)
    cache = model.new_cache(rows, context + max(lengths))
    cache.advance(torch.full((rows,), context, dtype=torch.int64))
    new = torch.zeros(rows, max(lengths), dtype=torch.int64)
    extend = torch.tensor(lengths)

    def one() -> None:
        with torch.inference_mode():  # as `jev serve` extends caches (`Decider`)
            model(new, cache=cache, lengths=extend)
        cache.truncate(torch.full((rows,), context))

    return median_time(one, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--width", type=int, default=8, help="1 + drafts of the longest row")
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    add_weights_option(parser)
    parser.add_argument("--no-write", action="store_true", help="print only; leave results and docs alone")
    args = parser.parse_args()

    model = Model.from_pretrained(args.model).eval()
    store_weights(model, args.weights)
    model.replay_cached_passes()  # as `jev serve` runs it
    w = args.width
    rows, results = [], {}
    for batch in args.batches:
        shapes = {
            "every row 1 token (a plain step)": [1] * batch,
            f"one row {w}, the rest 1": [w] + [1] * (batch - 1),
            f"every row {w}": [w] * batch,
            "half the rows finished (0), the rest 1": [1] * (batch - batch // 2) + [0] * (batch // 2),
        }
        plain = None
        for name, lengths in shapes.items():
            if batch == 1 and name.startswith(("one row", "half")):
                continue
            seconds = pass_seconds(model, lengths, args.context, args.repeats)
            plain = plain or seconds
            results[f"{batch}/{name}"] = {"lengths": lengths, "seconds": seconds}
            cells = [batch, name, sum(lengths), batch * max(lengths), f"{seconds * 1e3:.1f}", f"{seconds / plain:.2f}"]
            rows.append("| " + " | ".join(map(str, cells)) + " |")
    markdown = (
        f"`{args.model}` on {model.weights} weights, cached passes after {args.context} positions (median of "
        f"{args.repeats}).\n\n| rows | what each row extends by | tokens | rectangle | ms | against a plain step |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(rows)
    )
    print(markdown)
    if not args.no_write:
        settings = {k: str(v) for k, v in vars(args).items()}
        write_results("verify_pass", {"settings": settings, "runs": results}, markdown)


if __name__ == "__main__":
    main()
