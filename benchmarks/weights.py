"""What half-size weights (`jev serve --weights fp16|bf16|mixed`) change in the decisions: the same test
rows decided with the model's weights as trained (float32) and with its large matrices stored as
float16 (fbgemm) and as bfloat16 (bfloat16 products). `mixed` decides exactly as bf16 does (its
decision pass multiplies in bfloat16; `tests/test_weights.py`), so it has no column of its own.

Per closed field and stored form: accuracy, how often it picks the same value as float32, and the
largest and mean change of a calibrated probability. The first `--rows` test rows of each task are read.

    python -m benchmarks.weights --model models/default --data data --rows 400
"""

import argparse
from pathlib import Path

import numpy as np

from jev.data.examples import read_examples
from jev.decide.decider import Decider
from jev.evaluate.calibrate import raw_probabilities

TASKS = ("mail", "chat")
HALF = ("fp16", "bf16")


def compare(model: Path, data: Path, rows: int) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """`{task: {field: {weights: figures}}}` for each stored form in `HALF`, against float32."""
    deciders = {weights: Decider.load(model, speculative=False, weights=weights) for weights in ("float32", *HALF)}
    encode = deciders["float32"].encode
    results: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for name in TASKS:
        task = deciders["float32"].tasks[name]
        examples, _ = read_examples(data / name / "test.jsonl", task, lambda t, d: encode(t, d).token_ids)
        examples = examples[:rows]
        probs = {w: d.calibrated(task, raw_probabilities(d, task, examples)) for w, d in deciders.items()}
        results[name] = {}
        for spec in task.spec.closed_fields:
            y = np.array([e.label[spec.name] for e in examples])
            full = probs["float32"][spec.name]
            results[name][spec.name] = {}
            for weights in HALF:
                half = probs[weights][spec.name]
                change = np.abs(full - half)
                results[name][spec.name][weights] = {
                    "rows": len(y),
                    "accuracy_float32": float((full.argmax(1) == y).mean()),
                    "accuracy": float((half.argmax(1) == y).mean()),
                    "same_value": float((full.argmax(1) == half.argmax(1)).mean()),
                    "max_change": float(change.max()),
                    "mean_change": float(change.mean()),
                }
            print(name, spec.name, results[name][spec.name], flush=True)
    return results


def render(results: dict[str, dict[str, dict[str, dict[str, float]]]]) -> str:
    lines = [
        "Calibrated decisions of the first test rows of each task: float32 weights against fp16 and bf16.",
        "",
        "| task | field | rows | acc % float32 / fp16 / bf16 | same value % fp16 / bf16 "
        "| largest / mean change of a probability: fp16; bf16 |",
        "|---|---|---|---|---|---|",
    ]
    for task, fields in results.items():
        for field, by_weights in fields.items():
            first = by_weights[HALF[0]]
            accuracy = " / ".join(
                [f"{100 * first['accuracy_float32']:.1f}", *(f"{100 * by_weights[w]['accuracy']:.1f}" for w in HALF)]
            )
            same = " / ".join(f"{100 * by_weights[w]['same_value']:.1f}" for w in HALF)
            change = "; ".join(f"{by_weights[w]['max_change']:.1e} / {by_weights[w]['mean_change']:.1e}" for w in HALF)
            lines.append(f"| {task} | {field} | {first['rows']} | {accuracy} | {same} | {change} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, default=Path("data"), help="holds NAME/test.jsonl")
    parser.add_argument("--rows", type=int, default=400, help="test rows per task")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()
    results = compare(args.model, args.data, args.rows)
    markdown = render(results)
    print(markdown)
    if not args.no_write:
        from benchmarks.report import write_results

        write_results("weights", {"tasks": results}, markdown)


if __name__ == "__main__":
    main()
