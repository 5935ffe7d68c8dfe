"""What DSA's top-k costs by itself: each query attends only to the k keys its own heads weight most.

DSA keeps `index_topk` keys per query, one selection shared by every head. With the indexer's
selection the converted model's perplexity rises above its dense attention's
(`benchmarks/convert.py`). This asks how much of that any selection of k keys would cost: the
oracle selection takes, per query and layer, the k keys with the largest attention probability
summed over heads (the indexer's training target), from the model's own dense scores. It is run
on the source (SmolLM2, grouped-query attention) and on the converted model, beside the indexer,
on the held-out windows of `benchmarks/convert.py`. Also reported: the share of the head-summed
attention (of the model's own dense scores in that pass) that falls outside the kept keys, the
oracle's or the indexer's, averaged over layers and queries, and per band of query positions
(`[k, 2k)`, `[2k, 4k)`, ...): an indexer learns only the positions its training rows held.

    python -m benchmarks.topk_oracle --model runs/smollm2-mla-long --data data
    python -m benchmarks.topk_oracle --model FOLDER --data data --topk 256 --no-oracle --window 2048 --no-write
"""

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.convert import WINDOW, held_out_texts, perplexity, windows
from jev.convert.llama import LlamaTeacher
from jev.convert.source import read_source, smollm2_gguf
from jev.model import Model


class Missed:
    """Running mean of the head-summed attention mass outside each query's kept keys, over all
    queries and per band of query positions `[start, end)`."""

    def __init__(self, bands: list[tuple[int, int]]) -> None:
        self.total, self.count = 0.0, 0
        self.bands = {band: [0.0, 0] for band in bands}

    def add(self, mass: torch.Tensor) -> None:
        """`mass [B, T]`: each query's missed share."""
        self.total += float(mass.sum())
        self.count += mass.numel()
        for (start, end), sums in self.bands.items():
            sums[0] += float(mass[:, start:end].sum())
            sums[1] += mass[:, start:end].numel()

    @property
    def mean(self) -> float:
        return self.total / max(self.count, 1)

    def by_band(self) -> dict[str, float]:
        return {f"{start}-{end - 1}": total / max(count, 1) for (start, end), (total, count) in self.bands.items()}


def position_bands(k: int, window: int) -> list[tuple[int, int]]:
    """Query positions `[k, 2k), [2k, 4k), ...` up to the window: the queries that have more than k
    keys to choose from (every earlier one keeps all its keys)."""
    bands, start = [], k
    while start < window:
        bands.append((start, min(2 * start, window)))
        start *= 2
    return bands


@contextlib.contextmanager
def oracle_attention(k: int | None, missed: Missed) -> Iterator[None]:
    """Every causal `scaled_dot_product_attention` call keeps, per query, its k keys of largest
    head-summed probability. Both models attend through it when dense (the source always, the
    converted model under `attending_every_key`), so one hook serves both. With `k=None` a call
    keeps the keys its mask selects (DSA's indexer) and only the attention mass it misses is counted."""
    real = F.scaled_dot_product_attention

    def attend(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, **kwargs):
        if (k is None) == (attn_mask is None) or (attn_mask is None and not is_causal):
            raise ValueError("the oracle hook expects causal attention, or a selection mask with k=None")
        heads, length = query.shape[1], query.shape[2]
        keys = key.repeat_interleave(heads // key.shape[1], dim=1) if enable_gqa else key
        causal = torch.ones(length, length, dtype=torch.bool, device=query.device).tril()
        scores = (query @ keys.transpose(-1, -2)) * (scale or query.shape[-1] ** -0.5)
        probs = scores.masked_fill(~causal, float("-inf")).softmax(-1).sum(1) / heads
        if k is None:
            kept = attn_mask[:, 0] & causal
        else:
            top = probs.topk(min(k, length), dim=-1).indices
            kept = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, top, True) & causal
        missed.add(1 - (probs * kept).sum(-1))
        return real(query, key, value, attn_mask=kept.unsqueeze(1), scale=scale, enable_gqa=enable_gqa, **kwargs)

    F.scaled_dot_product_attention = attend
    try:
        yield
    finally:
        F.scaled_dot_product_attention = real


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=Path("runs/smollm2-mla-long"))
    parser.add_argument("--data", type=Path, default=Path("data"))
    parser.add_argument("--windows", type=int, default=6, help="windows per text")
    parser.add_argument("--window", type=int, default=WINDOW, help="tokens per window")
    parser.add_argument("--topk", type=int, nargs="+", default=[128, 256, 512])
    parser.add_argument("--no-oracle", action="store_true",
                        help="only dense and the indexer's selection (to compare converted folders quickly)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()

    source = read_source(smollm2_gguf())
    teacher = LlamaTeacher(source).eval()
    model = Model.from_pretrained(args.model)
    texts = {name: windows(source, text, args.windows, args.window) for name, text in held_out_texts(args.data).items()}
    reference = {name: perplexity(teacher, blocks) for name, blocks in texts.items()}
    rows: dict[str, dict] = {}

    def score(label: str, run, kept: int | None = None, oracle: bool = False) -> None:
        """Perplexity ratios; with `kept`, also the attention missed by the oracle's top-`kept` (`oracle`)
        or by the selection the model makes itself."""
        missed = Missed(position_bands(kept, args.window) if kept else [])
        with oracle_attention(kept if oracle else None, missed) if kept else contextlib.nullcontext():
            ppl = {name: perplexity(run, blocks) for name, blocks in texts.items()}
        rows[label] = {"ratio": {name: ppl[name] / reference[name] for name in texts},
                       "missed": missed.mean if kept else None, "missed_by_position": missed.by_band()}
        print(label, rows[label], flush=True)

    oracle_ks = [] if args.no_oracle else args.topk
    for k in oracle_ks:
        score(f"source, oracle top-{k}", teacher, k, oracle=True)
    with model.attending_every_key():
        score("converted, dense", model)
        for k in oracle_ks:
            score(f"converted, oracle top-{k}", model, k, oracle=True)
    for k in args.topk:
        with model.selecting(k):
            score(f"converted, indexer top-{k}", model, k)

    names = list(texts)
    lines = [
        f"Perplexity divided by the source's (SmolLM2-135M-Instruct, dense), on {args.windows} windows of "
        f"{args.window} tokens per text; converted = `{args.model}`. \"missed\" is the head-summed attention "
        "outside the kept keys (the oracle's or the indexer's), over all queries and by query position (the "
        "queries with more keys than are kept).",
        "",
        "| attention | " + " | ".join(names) + " | missed | missed by query position |",
        "|---|" + "---|" * (len(names) + 2),
    ]
    for label, row in rows.items():
        missed = "-" if row["missed"] is None else f"{100 * row['missed']:.1f}%"
        bands = ", ".join(f"{band}: {100 * share:.1f}%" for band, share in row["missed_by_position"].items()) or "-"
        lines.append(f"| {label} | " + " | ".join(f"{row['ratio'][n]:.3f}" for n in names) + f" | {missed} | {bands} |")
    markdown = "\n".join(lines)
    print(markdown)
    if not args.no_write:
        from benchmarks.report import write_results

        write_results("topk_oracle", {"source": reference, "rows": rows}, markdown)


if __name__ == "__main__":
    main()
