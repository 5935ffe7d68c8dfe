"""What DSA's top-k selection adds to a decision and a decode step past `index_topk` keys, in one run.

A pass over more keys than a layer's `index_topk` (256 in the default) has its indexer pick each
query's keys. The shipped selection ranks only the queries that see more than k keys; the first k
of a fresh pass see at most k and select them all (`jev.model.indexer.Indexer.select_mask`: a fresh
pass's attention reads the selection as a mask). Beside it:
- "every query ranked": the indexer scores and ranks every query, as it did before commit
  7be2115 (each selection is the same set);
- "dense": every layer's top-k unbounded, so nothing is selected: the floor the selection adds to.

The input is one long test mail, cut to each length (its first tokens, plus the field queries),
decided at batch 1 and per row at batch 8, each variant in turn, round after round (the median is
kept), with the same thread count.

A decode step past k keys selects too. After the same mail cut to each length, greedy plain decoding
of 32 tokens (the time of 33 less that of the first, the prompt's pass), at 1 and 4 sequences:
- "shipped": the step replayed as a traced graph, its selection read as a mask;
- "eagerly": the same step issued from Python, as every selecting step was before commit 60f395f;
- "dense": nothing selected, the step replayed.

    python -m benchmarks.selection_cost --model models/default --data data/mail/test.jsonl
"""

import argparse
import contextlib
import dataclasses
import json
import statistics
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import torch

from benchmarks.report import median_time, write_results
from jev.decide.decider import Decider
from jev.generate.loop import generate
from jev.model.indexer import Indexer

LENGTHS = (192, 320, 384, 512)
BATCHES = (1, 8)
DECODE_BATCHES = (1, 4)
STEPS = 32
Figures = dict[str, dict[str, dict[str, float]]]  # variant -> length -> batch -> milliseconds per row


def rank_every_query(select_mask: Callable) -> Callable:
    """`Indexer.select_mask` that ranks every query of a fresh pass too, as a cached pass does."""

    def select(self: Indexer, *selection, fresh: bool = False) -> torch.Tensor:
        return select_mask(self, *selection)

    return select


@contextlib.contextmanager
def variant(decider: Decider, name: str) -> Iterator[None]:
    """The decider's passes as `name` runs them, put back afterwards."""
    attentions = [layer.self_attn for layer in decider.model.backbone.layers]
    shipped_topk, shipped_select = [a.index_topk for a in attentions], Indexer.select_mask
    graphs = decider.model.step_graphs
    try:
        if name == "dense":
            for attention in attentions:
                attention.index_topk = 1 << 30
        elif name == "every query ranked":
            Indexer.select_mask = rank_every_query(shipped_select)
        elif name == "eagerly":
            decider.model.step_graphs = None
        yield
    finally:
        Indexer.select_mask = shipped_select
        decider.model.step_graphs = graphs
        for attention, topk in zip(attentions, shipped_topk, strict=True):
            attention.index_topk = topk


def long_mail(decider: Decider, data: Path, length: int) -> list[int]:
    """The token ids of the first test mail that encodes to at least `length` tokens uncut."""
    task = decider.tasks["mail"]
    entry = decider.manifest.tasks["mail"]
    decider.manifest.tasks["mail"] = dataclasses.replace(entry, max_input_tokens=1 << 20)
    try:
        for line in data.open():
            ids = decider.encode(task, json.loads(line)["input"]).token_ids
            if len(ids) >= length:
                return ids
    finally:
        decider.manifest.tasks["mail"] = entry
    raise SystemExit(f"no test mail in {data} encodes to {length} tokens")


def timed(model: Path, data: Path, lengths: list[int], rounds: int, repeats: int) -> tuple[dict, int, int]:
    """Milliseconds per decision and per decode step at each length, variant and batch size; the
    top-k, and the number of field queries a decision adds."""
    decider = Decider.load(model, speculative=False, weights="mixed", replay=True)
    task = decider.tasks["mail"]
    ids = long_mail(decider, data, max(lengths))
    measured = {
        "decision": (("shipped", "every query ranked", "dense"), BATCHES),
        "decode": (("shipped", "eagerly", "dense"), DECODE_BATCHES),
    }
    times = {
        what: {name: {n: {b: [] for b in batches} for n in lengths} for name in names}
        for what, (names, batches) in measured.items()
    }

    def decode(prompts: list[list[int]], tokens: int) -> None:
        generate(decider.model, prompts, tokens, temperature=0.0)

    for _ in range(rounds):
        for n in lengths:
            for what, (names, batches) in measured.items():
                for name in names:
                    with variant(decider, name):
                        for batch in batches:
                            rows = [ids[:n]] * batch
                            if what == "decision":
                                calls = repeats if batch == 1 else 1
                                ms = 1e3 * median_time(partial(decider.probabilities, task, rows), calls) / batch
                            else:
                                whole = median_time(partial(decode, rows, STEPS + 1), 1)
                                ms = 1e3 * (whole - median_time(partial(decode, rows, 1), 1)) / STEPS
                            times[what][name][n][batch].append(ms)
    figures = {
        what: {
            name: {str(n): {str(b): statistics.median(t) for b, t in by_batch.items()} for n, by_batch in by_n.items()}
            for name, by_n in by_name.items()
        }
        for what, by_name in times.items()
    }
    topk = min(layer.self_attn.index_topk for layer in decider.model.backbone.layers)
    return figures, topk, decider.decision_model.heads["mail"].queries.shape[0]


def table(figures: Figures, floor: str) -> list[str]:
    """Rows of `| tokens | batch | each variant |`, each cell with its ratio to the `floor` variant."""
    names = list(figures)
    lines = [f"| tokens | batch | {' | '.join(names)} |", "|---|---|" + "---|" * len(names)]
    for n, by_batch in figures[floor].items():
        for batch, base in by_batch.items():
            cells = [f"{figures[name][n][batch]:.1f} ({figures[name][n][batch] / base:.2f}x)" for name in names]
            lines.append(f"| {n} | {batch} | {' | '.join(cells)} |")
    return lines


def render(figures: dict[str, Figures], topk: int, fields: int) -> str:
    return "\n".join([
        f"One test mail cut to each length, `mixed` weights, top-k {topk}. A decision (the cut mail, then its "
        f"{fields} field queries): milliseconds per row, and the ratio to dense attention at the same length.",
        "",
        *table(figures["decision"], "dense"),
        "",
        f"A greedy decode step after the cut mail (the mean of {STEPS} steps): milliseconds, and the ratio "
        "to dense attention at the same length.",
        "",
        *table(figures["decode"], "dense"),
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, default=Path("data/mail/test.jsonl"), help="the mail test split")
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="timed calls at batch 1 per variant and round")
    parser.add_argument("--no-write", action="store_true", help="print only; leave results and docs alone")
    args = parser.parse_args()
    figures, topk, fields = timed(args.model, args.data, args.lengths, args.rounds, args.repeats)
    markdown = render(figures, topk, fields)
    print(markdown)
    if not args.no_write:
        write_results("selection_cost", {"variants": figures, "index_topk": topk}, markdown)


if __name__ == "__main__":
    main()
