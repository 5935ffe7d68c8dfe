"""Where the `mail` heads' errors are: in the mails they read whole, or in those cut to the reading limit.

The default model reads at most 192 tokens of a mail (`jev train decide --max-input-tokens`): a longer
one is cut to its first three quarters and last quarter of that. Per reading limit, for each field:
how many test mails were cut, accuracy on the mails read whole and on the cut ones, and the test
scores after vector scaling fitted on the calib split read at the same limit (what `jev calibrate`
fits). A limit above the trained one is read by heads that never saw such inputs in training.

    python -m benchmarks.reading_limit --model models/default --data data --limits 192 384
"""

import argparse
import dataclasses
from pathlib import Path

import numpy as np

from benchmarks.report import write_results
from jev.calibration.calibrators import VectorScaling
from jev.calibration.metrics import accuracy, ece, nll
from jev.data.examples import read_examples
from jev.decide.calibration import label_arrays
from jev.decide.decider import Decider
from jev.evaluate.calibrate import raw_probabilities
from jev.schema import Task

TASK = "mail"


def read_split(decider: Decider, task: Task, path: Path) -> tuple[dict, dict, np.ndarray]:
    """Raw head probabilities, labels and whether each row was cut, for every row of `path`."""
    cut: list[bool] = []

    def encode(t: Task, data: dict) -> list[int]:
        encoded = decider.encode(t, data)
        cut.append(encoded.truncated)
        return encoded.token_ids

    examples, _ = read_examples(path, task, encode)
    labels = label_arrays(task.spec.closed_fields, [e.label for e in examples])
    return raw_probabilities(decider, task, examples), labels, np.array(cut)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, default=Path("data"))
    parser.add_argument("--limits", type=int, nargs="+", default=[192, 384])
    args = parser.parse_args()
    decider = Decider.load(args.model, check_policies=False, speculative=False)
    task = decider.task_for(TASK)
    trained = decider.manifest.tasks[TASK].max_input_tokens
    results, rows = {}, []
    for limit in args.limits:
        decider.manifest.tasks[TASK] = dataclasses.replace(decider.manifest.tasks[TASK], max_input_tokens=limit)
        raw_calib, y_calib, _ = read_split(decider, task, args.data / TASK / "calib.jsonl")
        raw_test, y_test, cut = read_split(decider, task, args.data / TASK / "test.jsonl")
        for spec in task.spec.closed_fields:
            field, y = spec.name, y_test[spec.name]
            probs = VectorScaling().fit(raw_calib[field], y_calib[field]).predict_proba(raw_test[field])
            numbers = {
                "cut_share": float(cut.mean()),
                "accuracy_whole": accuracy(probs[~cut], y[~cut]),
                "accuracy_cut": accuracy(probs[cut], y[cut]),
                "errors_whole": int((probs[~cut].argmax(1) != y[~cut]).sum()),
                "errors_cut": int((probs[cut].argmax(1) != y[cut]).sum()),
                "accuracy": accuracy(probs, y), "nll": nll(probs, y), "ece": ece(probs, y),
            }
            results[f"{limit}.{field}"] = numbers
            rows.append(
                f"| {limit} | {field} | {100 * numbers['cut_share']:.1f} | "
                f"{100 * numbers['accuracy_whole']:.1f} ({numbers['errors_whole']}) / "
                f"{100 * numbers['accuracy_cut']:.1f} ({numbers['errors_cut']}) | "
                f"{100 * numbers['accuracy']:.1f} | {numbers['nll']:.4f} | {100 * numbers['ece']:.2f} |"
            )
            print(rows[-1], flush=True)
    markdown = (
        f"`{args.model}` (`mail` trained reading at most {trained} tokens), test split: the mails cut to the "
        "limit (the first three quarters and the last quarter of it kept), accuracy (errors) on the mails "
        "read whole and on the cut ones, and the scores after vector scaling fitted on calib at that limit.\n\n"
        "| reading limit | field | mails cut % | acc % (errors): whole / cut | acc % | NLL | ECE % |\n"
        "|---|---|---|---|---|---|---|\n" + "\n".join(rows)
    )
    print(markdown)
    write_results("reading_limit", {"trained_limit": trained, "fields": results}, markdown)


if __name__ == "__main__":
    main()
