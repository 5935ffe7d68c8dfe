"""Does teaching the language model to write the answer cost the heads anything? Raw head scores on test.

Compares decider folders that differ only in their training objective, e.g. the same base
continued for one epoch with and without `--answer-weight`:

    python -m benchmarks.answer_ablation --models runs/cont-heads runs/cont-answer
"""

import argparse
from pathlib import Path

import numpy as np

from benchmarks.report import write_results
from jev.calibration.metrics import accuracy, nll
from jev.engine.decider import Decider
from jev.train.calibrate import raw_probabilities
from jev.train.examples import read_examples

TASKS = ("mail", "chat")


def head_scores(folder: Path, data: Path) -> dict[str, dict[str, float]]:
    """Raw accuracy and NLL of every closed field on the test splits."""
    decider = Decider.load(folder, check_policies=False)
    scores = {}
    for name in TASKS:
        task = decider.tasks[name]
        examples, _ = read_examples(data / name / "test.jsonl", task, lambda t, d: decider.encode(t, d).token_ids)
        raw = raw_probabilities(decider, task, examples)
        for spec in task.spec.closed_fields:
            y = np.array([e.label[spec.name] for e in examples])
            scores[f"{name}.{spec.name}"] = {"accuracy": accuracy(raw[spec.name], y), "nll": nll(raw[spec.name], y)}
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=Path, nargs="+", required=True)
    parser.add_argument("--data", type=Path, default=Path("data"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    results = {str(folder): head_scores(folder, args.data) for folder in args.models}
    fields = list(next(iter(results.values())))
    header = "| field | " + " | ".join(f"`{m}` acc % / NLL" for m in results) + " |"
    lines = [header, "|---|" + "---|" * len(results)]
    for field in fields:
        cells = [f"{100 * r[field]['accuracy']:.1f} / {r[field]['nll']:.3f}" for r in results.values()]
        lines.append(f"| {field} | " + " | ".join(cells) + " |")
    markdown = "Raw heads (before calibration) on the test splits.\n\n" + "\n".join(lines)
    print(markdown)
    if not args.no_write:
        write_results("answer_ablation", {"models": results}, markdown)


if __name__ == "__main__":
    main()
