"""Calibration rules side by side: fitted on the calib split, scored on test, per closed field.

Temperature scaling; vector scaling (a temperature and a bias per value) at every candidate bias
penalty; and the penalty `jev calibrate` picks, the one of lowest 5-fold cross-validated NLL on the
calib rows. The model's raw head probabilities are computed once per split, as `jev calibrate`
computes them (the float32 model).

    python -m benchmarks.calibration_rules --model models/default --data data
"""

import argparse
from pathlib import Path

from benchmarks.report import write_results
from jev.calibration.calibrators import PENALTIES, TemperatureScaling, VectorScaling
from jev.calibration.metrics import ece, nll
from jev.decide.decider import Decider
from jev.evaluate.calibrate import held_out_probabilities

TASKS = ("mail", "chat")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, default=Path("data"))
    args = parser.parse_args()
    decider = Decider.load(args.model, check_policies=False, speculative=False)
    penalties = [p for p in PENALTIES if p is not None]
    results, rows = {}, []
    for task_name in TASKS:
        task = decider.task_for(task_name)
        (calib, y_calib), (test, y_test) = (
            held_out_probabilities(decider, task, args.data / task_name / f"{name}.jsonl") for name in ("calib", "test")
        )
        for spec in task.spec.closed_fields:
            field = spec.name
            scored = {"temperature": TemperatureScaling().fit(calib[field], y_calib[field])}
            for p in penalties:
                scored[f"bias {p:g}"] = VectorScaling(penalties=(p,)).fit(calib[field], y_calib[field])
            picked = VectorScaling().fit(calib[field], y_calib[field])
            numbers = {name: {"nll": nll(c.predict_proba(test[field]), y_test[field]),
                              "ece": ece(c.predict_proba(test[field]), y_test[field])} for name, c in scored.items()}
            picked_name = "temperature" if picked.penalty_ is None else f"bias {picked.penalty_:g}"
            results[f"{task_name}.{field}"] = {"rules": numbers, "picked": picked_name, "cv_nll": picked.cv_nll_}
            cells = [f"{n['nll']:.4f} / {100 * n['ece']:.2f}" for n in numbers.values()]
            rows.append(f"| {task_name}.{field} | " + " | ".join(cells) + f" | {picked_name} |")
    header = ["temperature", *(f"bias penalty {p:g}" for p in penalties), "picked (lowest CV NLL)"]
    markdown = (
        f"`{args.model}`, fitted on each task's calib split, scored on its test split: test NLL / ECE % "
        "(15 bins, top label). A bias penalty column is vector scaling at that penalty; `jev calibrate` "
        "picks the penalty, or none (temperature), of lowest 5-fold cross-validated NLL on calib.\n\n"
        "| field | " + " | ".join(header) + " |\n|" + "---|" * (len(header) + 1) + "\n" + "\n".join(rows)
    )
    print(markdown)
    write_results("calibration_rules", {"fields": results}, markdown)


if __name__ == "__main__":
    main()
