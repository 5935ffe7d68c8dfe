"""Jev's decision heads against two anchors, TF-IDF and MiniLM + LogisticRegression, on the test splits.

Both anchors are `jev.evaluate.baseline`'s: a LogisticRegression per field, trained on the train
split and calibrated on the calib split with scikit-learn's `CalibratedClassifierCV` (temperature
for multi-class fields, sigmoid for binary ones). TF-IDF is the data sets' recipe: word 1-2 grams
(character 1-3 grams for `language`) and C=10. MiniLM is the SetFit recipe without its contrastive
step: frozen all-MiniLM-L6-v2 embeddings (mean-pooled over at most 256 tokens, normalised), with
C picked per field from 0.1, 1, 10, 100 by log-loss on the valid split. Jev's heads are scored raw
and with the calibrators `jev calibrate` fitted on the same calib split. Everything is scored on test.

    python -m benchmarks.accuracy --model models/default --data data
"""

import argparse
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from jev.calibration.metrics import accuracy, ece, ece_floor, macro_f1, nll
from jev.decide.decider import Decider
from jev.evaluate.baseline import (
    BaselineProbabilities,
    baseline_probabilities,
    minilm_probabilities,
    read_labelled_texts,
    read_with_texts,
)
from jev.evaluate.calibrate import raw_probabilities
from jev.evaluate.minilm import MiniLMEncoder

TASKS = ("mail", "chat")
NAN = {"accuracy": float("nan"), "macro_f1": float("nan"), "nll": float("nan"), "ece": float("nan")}


def scores(probs: np.ndarray, y: np.ndarray) -> dict[str, float]:
    return {"accuracy": accuracy(probs, y), "macro_f1": macro_f1(probs, y), "nll": nll(probs, y), "ece": ece(probs, y)}


def anchor_scores(probs: BaselineProbabilities, y: np.ndarray) -> tuple[dict[str, float], dict[str, float] | None]:
    return scores(probs.raw, y), None if probs.calibrated is None else scores(probs.calibrated, y)


def evaluate_task(
    decider: Decider, name: str, data: Path, embed: Callable[[Sequence[str]], np.ndarray]
) -> dict[str, dict]:
    """Per closed field of the task: Jev raw and calibrated, and both anchors raw and calibrated, on test."""
    task = decider.tasks[name]
    examples, texts, _ = read_with_texts(data / name / "test.jsonl", task, lambda t, d: decider.encode(t, d).token_ids)
    started = time.perf_counter()
    raw = raw_probabilities(decider, task, examples)
    print(f"{name}: Jev decided {len(examples)} test rows in {time.perf_counter() - started:.1f} s")
    calibrated = decider.calibrated(task, raw)
    train, valid, calib = (read_labelled_texts(data / name / f"{s}.jsonl", task) for s in ("train", "valid", "calib"))
    tfidf = baseline_probabilities(task, train, calib, texts)
    started = time.perf_counter()
    minilm = minilm_probabilities(task, train, valid, calib, texts, embed)
    rows = len(train.texts) + len(valid.texts) + len(calib.texts) + len(texts)
    print(f"{name}: the MiniLM anchor embedded {rows} rows and fitted in {time.perf_counter() - started:.1f} s")
    results = {}
    for spec in task.spec.closed_fields:
        y = np.array([e.label[spec.name] for e in examples])
        tfidf_raw, tfidf_calibrated = anchor_scores(tfidf[spec.name], y)
        minilm_raw, minilm_calibrated = anchor_scores(minilm[spec.name], y)
        results[spec.name] = {
            "n_test": len(y),
            "jev_raw": scores(raw[spec.name], y),
            "jev_calibrated": scores(calibrated[spec.name], y),
            "jev_ece_floor": ece_floor(calibrated[spec.name])._asdict(),
            "baseline_raw": tfidf_raw,
            "baseline_calibrated": tfidf_calibrated,
            "minilm_raw": minilm_raw,
            "minilm_calibrated": minilm_calibrated,
            "minilm_C": minilm[spec.name].C,
        }
        print(name, spec.name, results[spec.name])
    return results


def render(results: dict[str, dict[str, dict]], model: Path) -> str:
    lines = [
        f"Test splits. Jev = `{model}` (raw heads, and after `jev calibrate` on the calib split). TF-IDF = "
        "TF-IDF + LogisticRegression(C=10); MiniLM = frozen all-MiniLM-L6-v2 embeddings + LogisticRegression, "
        "C picked on valid (shown). Both anchors are trained on the same train split and calibrated with "
        "`CalibratedClassifierCV` on calib. ECE floor = the ECE Jev's calibrated probabilities would show "
        "on this many rows if they were perfectly calibrated (mean and 90% interval over labels drawn from them).",
        "",
        "| task | field | acc % Jev / TF-IDF / MiniLM | macro-F1 % Jev / TF-IDF / MiniLM "
        "| NLL raw / cal: Jev; TF-IDF; MiniLM | ECE % raw / cal: Jev; TF-IDF; MiniLM | ECE floor % | MiniLM C |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for task, fields in results.items():
        for field, r in fields.items():
            raws = [r["jev_raw"], r["baseline_raw"], r["minilm_raw"]]
            cals = [r["jev_calibrated"], r["baseline_calibrated"] or NAN, r["minilm_calibrated"] or NAN]
            acc = " / ".join(f"{100 * s['accuracy']:.1f}" for s in raws)
            f1 = " / ".join(f"{100 * s['macro_f1']:.1f}" for s in raws)
            loss = "; ".join(f"{a['nll']:.3f} / {b['nll']:.3f}" for a, b in zip(raws, cals, strict=True))
            error = "; ".join(f"{100 * a['ece']:.1f} / {100 * b['ece']:.1f}" for a, b in zip(raws, cals, strict=True))
            floor = r["jev_ece_floor"]
            spread = f"{100 * floor['value']:.1f} ({100 * floor['low']:.1f}-{100 * floor['high']:.1f})"
            lines.append(f"| {task} | {field} | {acc} | {f1} | {loss} | {error} | {spread} | {r['minilm_C']:g} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, default=Path("data"), help="holds NAME/{train,valid,calib,test}.jsonl")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()

    decider = Decider.load(args.model)
    embed = MiniLMEncoder.load().encode
    results = {name: evaluate_task(decider, name, args.data, embed) for name in TASKS}
    markdown = render(results, args.model)
    print(markdown)
    if not args.no_write:
        from benchmarks.report import write_results

        write_results("accuracy", {"tasks": results}, markdown)


if __name__ == "__main__":
    main()
