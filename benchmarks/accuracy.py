"""Jev's decision heads against the classic baseline, TF-IDF + LogisticRegression, on the test splits.

The baseline is the data sets' anchor recipe (`jev.train.baseline`): TF-IDF word 1-2 grams
(character 1-3 grams for `language`) and `LogisticRegression(C=10)` per field, trained on the
train split and calibrated on the calib split with scikit-learn's `CalibratedClassifierCV`
(temperature for multi-class fields, sigmoid for binary ones). Jev's heads are scored raw and with
the calibrators `jev calibrate` fitted on the same calib split. Everything is scored on test.

    python -m benchmarks.accuracy --model models/default --data data
"""

import argparse
import time
from pathlib import Path

import numpy as np

from jev.calibration.metrics import accuracy, ece, macro_f1, nll
from jev.engine.decider import Decider
from jev.train.baseline import FieldBaseline, read_labelled_texts, read_with_texts
from jev.train.calibrate import raw_probabilities

TASKS = ("mail", "chat")


def scores(probs: np.ndarray, y: np.ndarray) -> dict[str, float]:
    return {"accuracy": accuracy(probs, y), "macro_f1": macro_f1(probs, y), "nll": nll(probs, y), "ece": ece(probs, y)}


def evaluate_task(decider: Decider, name: str, data: Path) -> dict[str, dict]:
    task = decider.tasks[name]
    examples, texts, _ = read_with_texts(data / name / "test.jsonl", task, lambda t, d: decider.encode(t, d).token_ids)
    started = time.perf_counter()
    raw = raw_probabilities(decider, task, examples)
    seconds = time.perf_counter() - started
    print(f"{name}: Jev decided {len(examples)} test rows in {seconds:.1f} s")
    calibrated = decider.calibrated(task, raw)
    train = read_labelled_texts(data / name / "train.jsonl", task)
    calib = read_labelled_texts(data / name / "calib.jsonl", task)
    results = {}
    for spec in task.spec.closed_fields:
        y = np.array([e.label[spec.name] for e in examples])
        baseline = FieldBaseline(spec.name, spec.n_values).fit(train.texts, [row[spec.name] for row in train.labels])
        note = baseline.calibrate(calib.texts, [row[spec.name] for row in calib.labels])
        results[spec.name] = {
            "n_test": len(y),
            "jev_raw": scores(raw[spec.name], y),
            "jev_calibrated": scores(calibrated[spec.name], y),
            "baseline_raw": scores(baseline.predict_proba(texts), y),
            "baseline_calibrated": None if note else scores(baseline.predict_proba(texts, calibrated=True), y),
        }
        print(name, spec.name, results[spec.name])
    return results


def render(results: dict[str, dict[str, dict]], model: Path) -> str:
    lines = [
        f"Test splits. Jev = `{model}` (raw heads, and after `jev calibrate` on the calib split); baseline = "
        "TF-IDF + LogisticRegression on the same train split, calibrated with `CalibratedClassifierCV` on calib.",
        "",
        "| task | field | Jev acc % | baseline acc % | Jev macro-F1 % | baseline macro-F1 % "
        "| Jev NLL raw / cal | baseline NLL raw / cal | Jev ECE % raw / cal | baseline ECE % raw / cal |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task, fields in results.items():
        for field, r in fields.items():
            jev, jev_cal, base = r["jev_raw"], r["jev_calibrated"], r["baseline_raw"]
            base_cal = r["baseline_calibrated"] or {"nll": float("nan"), "ece": float("nan")}
            lines.append(
                f"| {task} | {field} | {100 * jev['accuracy']:.1f} | {100 * base['accuracy']:.1f} | "
                f"{100 * jev['macro_f1']:.1f} | {100 * base['macro_f1']:.1f} | "
                f"{jev['nll']:.3f} / {jev_cal['nll']:.3f} | {base['nll']:.3f} / {base_cal['nll']:.3f} | "
                f"{100 * jev['ece']:.1f} / {100 * jev_cal['ece']:.1f} | "
                f"{100 * base['ece']:.1f} / {100 * base_cal['ece']:.1f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, default=Path("data"))
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()

    decider = Decider.load(args.model)
    results = {name: evaluate_task(decider, name, args.data) for name in TASKS}
    markdown = render(results, args.model)
    print(markdown)
    if not args.no_write:
        from benchmarks.report import write_results

        write_results("accuracy", {"tasks": results}, markdown)


if __name__ == "__main__":
    main()
