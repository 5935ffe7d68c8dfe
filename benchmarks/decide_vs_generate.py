"""The one-pass claim, measured: Jev's decision heads against the same weights writing the answer as JSON.

Three ways to get a decision's closed fields from one checkpoint, on the same test rows:

- heads: one forward pass over `[input][field queries]`, raw and calibrated (`jev calibrate`);
- Jev's constrained decoding (`jev.generate.constrained`): the language model writes the JSON on the
  latent cache, greedy, only allowed values' tokens, forced tokens fed without a pass of their own;
  its probabilities are first-token (renormalised over the allowed values) and exact (every
  value's whole token sequence scored);
- Outlines on transformers (`benchmarks/outlines_path.py`): the same checkpoint loaded by
  transformers, greedy under Outlines' JSON-schema constraint.

Per field: accuracy, NLL and ECE (15 equal-width bins). Per decision: sequential forward passes,
tokens written, wall time at batch 1 and batch 32, outputs that failed to parse or validate, and
Outlines' first call (grammar compile and torch.compile warm-up included).

    python -m benchmarks.decide_vs_generate --model models/default --data data
"""

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.outlines_path import OutlinesDecider
from benchmarks.report import write_results
from jev.calibration.metrics import accuracy, ece, nll
from jev.data.examples import Example, read_examples
from jev.decide.decider import Decider
from jev.generate.constrained import write_answers
from jev.schema import Task
from jev.schema.fields import same_value

TASKS = ("mail", "chat")
BATCH = 32
N_BINS = 15


def test_rows(decider: Decider, task: Task, path: Path, limit: int) -> list[Example]:
    """The first `limit` rows of the test split, encoded as the decider serves them."""
    examples, _ = read_examples(path, task, lambda t, d: decider.encode(t, d).token_ids)
    return examples[:limit]


def scores(probs: np.ndarray, y: np.ndarray) -> dict[str, float]:
    return {"accuracy": accuracy(probs, y), "nll": nll(probs, y), "ece": ece(probs, y, n_bins=N_BINS)}


def in_batches(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def heads(decider: Decider, task: Task, ids: list[list[int]]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Raw and calibrated head probabilities, batch by batch."""
    parts = [decider.probabilities(task, batch) for batch in in_batches(ids, BATCH)]
    raw = {f.name: np.concatenate([p[f.name] for p in parts]) for f in task.spec.closed_fields}
    return raw, decider.calibrated(task, raw)


def constrained(decider: Decider, task: Task, ids: list[list[int]]) -> dict[str, Any]:
    """Jev's constrained answers with first-token and exact probabilities, batch by batch."""
    answer = decider.answer_tokens(task)
    parts = [write_answers(decider.model, answer, batch, exact=True) for batch in in_batches(ids, BATCH)]
    fields = [f.name for f in task.spec.closed_fields]
    return {
        "values": {n: np.concatenate([p.values[n] for p in parts]) for n in fields},
        "first_token": {n: np.concatenate([p.first_token[n] for p in parts]) for n in fields},
        "exact": {n: np.concatenate([p.exact[n] for p in parts]) for n in fields},
    }


def timed(run, batches: list[list[list[int]]]) -> tuple[float, list[Any]]:
    """Mean wall ms per decision over the batches, and each batch's result."""
    outputs, started = [], time.perf_counter()
    for batch in batches:
        outputs.append(run(batch))
    seconds = time.perf_counter() - started
    return 1e3 * seconds / sum(len(b) for b in batches), outputs


def timings(decider: Decider, outlines: OutlinesDecider, task: Task, ids: list[list[int]]) -> dict[str, dict]:
    """Batch 1 and batch 32 cost per decision of each path on the same rows."""
    answer = decider.answer_tokens(task)
    paths = {
        "heads": lambda b: decider.calibrated(task, decider.probabilities(task, b)),
        "jev_generate": lambda b: write_answers(decider.model, answer, b),
        "jev_generate_exact": lambda b: write_answers(decider.model, answer, b, exact=True),
        "outlines": lambda b: outlines.decide(task, b, batch_size=len(b)),
    }
    result = {}
    for name, run in paths.items():
        one_ms, singles = timed(run, in_batches(ids, 1))
        many_ms, _ = timed(run, in_batches(ids, BATCH))
        passes = _passes(name, singles, len(task.spec.closed_fields))
        result[name] = {"ms_batch_1": one_ms, f"ms_batch_{BATCH}": many_ms, **passes}
    return result


def _passes(name: str, singles: list[Any], n_fields: int) -> dict[str, float]:
    """Mean sequential passes and tokens written per decision at batch 1."""
    if name == "heads":
        return {"passes": 1.0, "tokens": 0.0}
    if name == "outlines":
        return {"passes": float(np.mean([r[0].forward_passes for r in singles])),
                "tokens": float(np.mean([r[0].new_tokens for r in singles]))}
    scoring = n_fields if name == "jev_generate_exact" else 0  # one batched scoring pass per closed field
    return {"passes": float(np.mean([w.forward_passes + scoring for w in singles])),
            "tokens": float(np.mean([w.answer_tokens[0] for w in singles]))}


def run_task(decider: Decider, outlines: OutlinesDecider, name: str, data: Path, limit: int, timing_rows: int) -> dict:
    task = decider.tasks[name]
    examples = test_rows(decider, task, data / name / "test.jsonl", limit)
    ids = [e.token_ids for e in examples]
    first_started = time.perf_counter()
    outlines.decide(task, ids[:1])
    first_call = time.perf_counter() - first_started
    raw, calibrated = heads(decider, task, ids)
    generated = constrained(decider, task, ids)
    written = outlines.decide(task, ids, batch_size=BATCH)
    fields = {}
    for spec in task.spec.closed_fields:
        y = np.array([e.label[spec.name] for e in examples])
        outlines_hits = [
            w.value is not None and same_value(w.value[spec.name], spec.values[label])
            for w, label in zip(written, y, strict=True)
        ]
        fields[spec.name] = {
            "heads_calibrated": scores(calibrated[spec.name], y),
            "heads_raw": scores(raw[spec.name], y),
            "generate_first_token": scores(generated["first_token"][spec.name], y),
            "generate_exact": scores(generated["exact"][spec.name], y),
            "jev_generate_accuracy": float(np.mean(generated["values"][spec.name] == y)),
            "outlines_accuracy": float(np.mean(outlines_hits)),
        }
        print(name, spec.name, fields[spec.name])
    cost = timings(decider, outlines, task, ids[:timing_rows])
    print(name, cost)
    return {
        "rows": len(examples),
        "timing_rows": min(timing_rows, len(examples)),
        "fields": fields,
        "cost": cost,
        "outlines_first_call_s": first_call,
        "outlines_compile_s": outlines.compiled[name].compile_seconds,
        "outlines_failures": sum(w.value is None for w in written),
        "jev_generate_failures": 0,
    }


def render(results: dict[str, dict], model: Path) -> str:
    lines = [
        f"Model `{model}`: the heads and both generative paths use the same weights. First rows of each test split.",
        "",
        "| task | field | heads cal. acc / NLL / ECE | heads raw | generate, first-token p | generate, exact p "
        "| Jev generate acc | Outlines acc |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for task, result in results.items():
        for field, r in result["fields"].items():
            cells = [f"{100 * s['accuracy']:.1f} / {s['nll']:.3f} / {100 * s['ece']:.1f}"
                     for s in (r["heads_calibrated"], r["heads_raw"], r["generate_first_token"], r["generate_exact"])]
            lines.append(f"| {task} ({result['rows']}) | {field} | " + " | ".join(cells)
                         + f" | {100 * r['jev_generate_accuracy']:.1f} | {100 * r['outlines_accuracy']:.1f} |")
    lines += [
        "",
        "Accuracy and ECE in %, NLL in nats. Per decision, at batch 1 and 32 on the first rows of each split "
        "(passes: sequential forward passes at batch 1, prefill included; tokens: answer tokens written):",
        "",
        f"| task | path | passes | tokens | ms, batch 1 | ms, batch {BATCH} | invalid outputs |",
        "|---|---|---|---|---|---|---|",
    ]
    for task, result in results.items():
        failures = {"heads": 0, "jev_generate": 0, "jev_generate_exact": 0, "outlines": result["outlines_failures"]}
        for path, c in result["cost"].items():
            lines.append(
                f"| {task} ({result['timing_rows']}) | {path} | {c['passes']:.1f} | {c['tokens']:.1f} "
                f"| {c['ms_batch_1']:.1f} | {c[f'ms_batch_{BATCH}']:.1f} | {failures[path]} of {result['rows']} |"
            )
    for task, result in results.items():
        heads, outlines = result["cost"]["heads"], result["cost"]["outlines"]
        jev = result["cost"]["jev_generate"]
        lines.append(
            f"\n{task}: at batch 1 the heads take {outlines['passes'] / heads['passes']:.0f}x fewer sequential passes "
            f"than Outlines and {jev['passes'] / heads['passes']:.0f}x fewer than Jev's constrained decoding, and "
            f"{outlines['ms_batch_1'] / heads['ms_batch_1']:.0f}x less wall time than Outlines "
            f"({jev['ms_batch_1'] / heads['ms_batch_1']:.1f}x less than Jev's constrained decoding). Outlines' first "
            f"call took {result['outlines_first_call_s']:.1f} s (schema compile {result['outlines_compile_s']:.2f} s)."
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, default=Path("data"))
    parser.add_argument("--limit", type=int, default=300, help="test rows per task (the first ones)")
    parser.add_argument("--timing-rows", type=int, default=32, help="rows timed at batch 1 and batch 32")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()
    decider = Decider.load(args.model)
    outlines = OutlinesDecider(args.model)
    results = {name: run_task(decider, outlines, name, args.data, args.limit, args.timing_rows) for name in args.tasks}
    markdown = render(results, args.model)
    print(markdown)
    if not args.no_write:
        write_results("decide_vs_generate", results, markdown)


if __name__ == "__main__":
    main()
