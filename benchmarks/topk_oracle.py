"""What DSA's top-k costs by itself: each query attends only to the k keys its own heads weight most.

DSA keeps `index_topk` keys per query, one selection shared by every head. With the indexer's
selection the converted model's perplexity is 1.7-2.1x the source's at k = 256 of 1024
(`benchmarks/convert.py`). This asks how much of that any selection of k keys would cost: the
oracle selection takes, per query and layer, the k keys with the largest attention probability
summed over heads (the indexer's training target), from the model's own dense scores. It is run
on the source (SmolLM2, grouped-query attention) and on the converted model, beside the indexer,
on the held-out windows of `benchmarks/convert.py`. Also reported: the share of the head-summed
attention (of the model's own dense scores in that pass) that falls outside the kept keys, the
oracle's or the indexer's, averaged over layers and queries.

    python -m benchmarks.topk_oracle --model runs/smollm2-mla-long --data data
"""

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.convert import held_out_texts, perplexity, windows
from jev.convert.llama import LlamaTeacher
from jev.convert.source import read_source, smollm2_gguf
from jev.model import Model


class Missed:
    """Running mean of the head-summed attention mass outside each query's kept keys."""

    def __init__(self) -> None:
        self.total, self.count = 0.0, 0

    def add(self, mass: torch.Tensor) -> None:
        self.total += float(mass.sum())
        self.count += mass.numel()

    @property
    def mean(self) -> float:
        return self.total / max(self.count, 1)


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
    parser.add_argument("--windows", type=int, default=6, help="1024-token windows per text")
    parser.add_argument("--topk", type=int, nargs="+", default=[128, 256, 512])
    parser.add_argument("--no-oracle", action="store_true",
                        help="only dense and the indexer's selection (to compare converted folders quickly)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()

    source = read_source(smollm2_gguf())
    teacher = LlamaTeacher(source).eval()
    model = Model.from_pretrained(args.model)
    texts = {name: windows(source, text, args.windows) for name, text in held_out_texts(args.data).items()}
    reference = {name: perplexity(teacher, blocks) for name, blocks in texts.items()}
    rows: dict[str, dict] = {}

    def score(label: str, run, k: int | None = None, hooked: bool = True) -> None:
        missed = Missed()
        with oracle_attention(k, missed) if hooked else contextlib.nullcontext():
            ppl = {name: perplexity(run, blocks) for name, blocks in texts.items()}
        rows[label] = {"ratio": {name: ppl[name] / reference[name] for name in texts},
                       "missed": missed.mean if hooked else None}
        print(label, rows[label], flush=True)

    oracle_ks = [] if args.no_oracle else args.topk
    for k in oracle_ks:
        score(f"source, oracle top-{k}", teacher, k)
    with model.attending_every_key():
        score("converted, dense", model, hooked=False)
        for k in oracle_ks:
            score(f"converted, oracle top-{k}", model, k)
    for k in args.topk:
        with model.selecting(k):
            score(f"converted, indexer top-{k}", model, None)

    names = list(texts)
    lines = [
        f"Perplexity divided by the source's (SmolLM2-135M-Instruct, dense), on {args.windows} windows of 1024 "
        f"tokens per text; converted = `{args.model}`. \"missed\" is the head-summed attention outside the "
        "kept keys (the oracle's or the indexer's).",
        "",
        "| attention | " + " | ".join(names) + " | missed |",
        "|---|" + "---|" * (len(names) + 1),
    ]
    for label, row in rows.items():
        missed = "-" if row["missed"] is None else f"{100 * row['missed']:.1f}%"
        lines.append(f"| {label} | " + " | ".join(f"{row['ratio'][n]:.3f}" for n in names) + f" | {missed} |")
    markdown = "\n".join(lines)
    print(markdown)
    if not args.no_write:
        from benchmarks.report import write_results

        write_results("topk_oracle", {"source": reference, "rows": rows}, markdown)


if __name__ == "__main__":
    main()
