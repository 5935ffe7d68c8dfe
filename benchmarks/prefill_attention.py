"""What the attention of a fresh bfloat16 pass (a decision, a prompt) costs: SDPA's fused CPU kernel
(`jev.model.mla.fused_causal_attention`, taken where the CPU has AMX) against Jev's explicit form
(`jev.model.mla.explicit_causal_attention`, taken elsewhere), and how far each lands from
float64 on the shipped model's own queries, keys and values. The explicit form without its shift of
the scores by each row's peak is timed and measured beside them: what the shift costs and buys.
What the form buys a whole decision is in `benchmarks/decision_pass.py`.

- Time: random bfloat16 heads of the model's shape (9 heads; queries and keys 96 wide, values 64,
  padded to 96 for SDPA, as Jev calls it), per sequence at batch 1 and 32, by length, the
  forms timed in turn over `--rounds` rounds (median), with the same thread count.
- Error: every layer's inputs to the attention in the decision passes of the first `--mails` test
  mails (recorded by wrapping the function), against float64 attention: mean and largest absolute
  difference, per layer, summarised over the layers.

    python -m benchmarks.prefill_attention --model models/default --data data/mail/test.jsonl
"""

import argparse
import json
import statistics
from functools import partial
from pathlib import Path

import torch

from benchmarks.report import median_time, write_results
from jev.decide.decider import Decider
from jev.model import mla

HEADS, QK, V = 9, 96, 64
Figures = dict[str, dict[str, float]]  # per form: its measures
LENGTHS = (64, 128, 192, 256, 512)
BATCHES = (1, 32)


def unshifted(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor:
    """The explicit form with the scores rounded to bfloat16 as they are, in the same chunks."""
    size, heads, length, _ = query.shape
    mask = torch.full((length, length), float("-inf"), dtype=query.dtype).triu(1)
    per_chunk = max(1, mla.SCORES_PER_CHUNK // (heads * length * length))
    out = []
    for start in range(0, size, per_chunk):
        chunk = slice(start, start + per_chunk)
        scores = torch.matmul(query[chunk], key[chunk].transpose(-1, -2)).mul_(scale).add_(mask)
        out.append(torch.matmul(torch.softmax(scores, dim=-1), value[chunk]))
    return torch.cat(out)


FORMS = {"sdpa": mla.fused_causal_attention, "explicit": mla.explicit_causal_attention, "unshifted": unshifted}
LABELS = {"sdpa": "SDPA fused (values padded)", "explicit": "explicit", "unshifted": "explicit, scores unshifted"}


def float64_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor:
    length = query.shape[2]
    scores = query.double() @ key.double().transpose(-1, -2) * scale
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(~causal, float("-inf")), -1) @ value.double()


def timings(rounds: int, repeats: int) -> list[dict]:
    """Milliseconds per sequence of each form, by batch and length."""
    rows = []
    for batch in BATCHES:
        for length in LENGTHS:
            query, key = (torch.randn(batch, HEADS, length, QK).bfloat16() for _ in range(2))
            value = torch.randn(batch, HEADS, length, V).bfloat16()
            calls = {name: partial(form, query, key, value, QK**-0.5) for name, form in FORMS.items()}
            times: dict[str, list[float]] = {name: [] for name in calls}
            for _ in range(rounds):
                for name, call in calls.items():
                    times[name].append(1e3 * median_time(call, repeats) / batch)
            medians = {f"{name}_ms": statistics.median(t) for name, t in times.items()}
            rows.append({"batch": batch, "length": length, **medians})
    return rows


def recorded_inputs(model: Path, data: Path, mails: int) -> list[tuple[torch.Tensor, ...]]:
    """Each layer's (queries, keys, values, scale) in the decision passes of the first `mails` test mails."""
    decider = Decider.load(model, speculative=False, weights="bf16")
    task = decider.tasks["mail"]
    rows = [json.loads(line)["input"] for line in data.open()][:mails]
    recorded = []
    form = mla.causal_attention_bfloat16

    def recording(query, key, value, scale):
        recorded.append((query.clone(), key.clone(), value.clone(), scale))
        return form(query, key, value, scale)

    mla.causal_attention_bfloat16 = recording
    try:
        for row in rows:
            decider.probabilities(task, [decider.encode(task, row).token_ids])
    finally:
        mla.causal_attention_bfloat16 = form
    return recorded


def largest_score(recorded: list[tuple[torch.Tensor, ...]]) -> float:
    """The largest absolute scaled score a query gives a visible key in the recorded inputs."""
    largest = 0.0
    for query, key, _, scale in recorded:
        scores = query.double() @ key.double().transpose(-1, -2) * scale
        largest = max(largest, float(scores.tril().abs().max()))
    return largest


def errors(recorded: list[tuple[torch.Tensor, ...]]) -> Figures:
    """Per form: the mean over layers of the mean absolute error, and the largest absolute error."""
    out = {}
    for name, form in FORMS.items():
        means, largest = [], 0.0
        for query, key, value, scale in recorded:
            difference = (form(query, key, value, scale).double() - float64_attention(query, key, value, scale)).abs()
            means.append(float(difference.mean()))
            largest = max(largest, float(difference.max()))
        out[name] = {"mean_abs_error": statistics.mean(means), "max_abs_error": largest}
    return out


def render(rows: list[dict], error: Figures, mails: int, score: float) -> str:
    lines = [
        "Milliseconds per sequence, 9 heads of 96 (values 64), bfloat16, causal; the ratio is the "
        "explicit form's time over SDPA's.",
        "",
        f"| batch | tokens | {' | '.join(LABELS.values())} | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = " | ".join(f"{row[f'{name}_ms']:.3f}" for name in FORMS)
        lines.append(f"| {row['batch']} | {row['length']} | {cells} | {row['explicit_ms'] / row['sdpa_ms']:.2f}x |")
    lines += [
        "",
        f"Error against float64 attention on the model's own inputs (every layer, decision passes of {mails} "
        f"test mails, whose largest scaled score is {score:.1f}):",
        "",
        "| form | mean absolute error (mean over layers) | largest absolute error |",
        "|---|---|---|",
    ]
    for name, label in LABELS.items():
        lines.append(f"| {label} | {error[name]['mean_abs_error']:.2e} | {error[name]['max_abs_error']:.2e} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, default=Path("data/mail/test.jsonl"), help="the mail test split")
    parser.add_argument("--mails", type=int, default=8, help="test mails whose attention inputs are recorded")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per form and round")
    parser.add_argument("--no-write", action="store_true", help="print only; leave results and docs alone")
    args = parser.parse_args()
    rows = timings(args.rounds, args.repeats)
    recorded = recorded_inputs(args.model, args.data, args.mails)
    error, score = errors(recorded), largest_score(recorded)
    markdown = render(rows, error, args.mails, score)
    print(markdown)
    if not args.no_write:
        results = {"timings": rows, "errors": error, "largest_score": score}
        write_results("prefill_attention", results, markdown)


if __name__ == "__main__":
    main()
