"""What fp16 weights (`jev serve --weights fp16`) change in the decisions: the same test rows decided
with the model's weights as trained (float32) and with its large matrices stored as float16.

Per closed field: accuracy under each, how often the two pick the same value, and the largest and
mean change of a calibrated probability. The first `--rows` test rows of each task are read.

    python -m benchmarks.fp16 --model models/default --data data --rows 400
"""

import argparse
from pathlib import Path

import numpy as np

from jev.data.examples import read_examples
from jev.decide.decider import Decider
from jev.evaluate.calibrate import raw_probabilities

TASKS = ("mail", "chat")


def compare(model: Path, data: Path, rows: int) -> dict[str, dict[str, dict[str, float]]]:
    deciders = {weights: Decider.load(model, speculative=False, weights=weights) for weights in ("float32", "fp16")}
    encode = deciders["float32"].encode
    results: dict[str, dict[str, dict[str, float]]] = {}
    for name in TASKS:
        task = deciders["float32"].tasks[name]
        examples, _ = read_examples(data / name / "test.jsonl", task, lambda t, d: encode(t, d).token_ids)
        examples = examples[:rows]
        probs = {w: d.calibrated(task, raw_probabilities(d, task, examples)) for w, d in deciders.items()}
        results[name] = {}
        for spec in task.spec.closed_fields:
            y = np.array([e.label[spec.name] for e in examples])
            full, half = probs["float32"][spec.name], probs["fp16"][spec.name]
            change = np.abs(full - half)
            results[name][spec.name] = {
                "rows": len(y),
                "accuracy_float32": float((full.argmax(1) == y).mean()),
                "accuracy_fp16": float((half.argmax(1) == y).mean()),
                "same_value": float((full.argmax(1) == half.argmax(1)).mean()),
                "max_change": float(change.max()),
                "mean_change": float(change.mean()),
            }
            print(name, spec.name, results[name][spec.name], flush=True)
    return results


def render(results: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = [
        "Calibrated decisions of the first test rows of each task, float32 weights against fp16.",
        "",
        "| task | field | rows | acc % float32 / fp16 | same value % | largest / mean change of a probability |",
        "|---|---|---|---|---|---|",
    ]
    for task, fields in results.items():
        for field, r in fields.items():
            accuracy = f"{100 * r['accuracy_float32']:.1f} / {100 * r['accuracy_fp16']:.1f}"
            change = f"{r['max_change']:.1e} / {r['mean_change']:.1e}"
            lines.append(f"| {task} | {field} | {r['rows']} | {accuracy} | {100 * r['same_value']:.1f} | {change} |")
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

        write_results("fp16", {"tasks": results}, markdown)


if __name__ == "__main__":
    main()
