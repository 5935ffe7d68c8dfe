"""Jev's decision heads against the classic baseline, TF-IDF + LogisticRegression, on the test splits.

The baseline follows the data sets' anchor recipe: `TfidfVectorizer(ngram_range=(1, 2), min_df=2,
sublinear_tf=True)` (character 1-3 grams for `language`) and `LogisticRegression(C=10)`, one model
per field, trained on the train split. Both are scored per field on the test split: accuracy,
macro-F1 and log-loss (Jev's raw head probabilities; calibration is reported separately).

    python benchmarks/accuracy.py --model models/default --data data
"""

import argparse
import time
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score, log_loss

from jev.data.jsonl import read_jsonl
from jev.engine.decider import Decider

TASKS = {"mail": ("body", ["kind", "mailing_list", "reply"]), "chat": ("message", ["language", "topic"])}


def baseline(train_text: list[str], train_y: list, test_text: list[str], field: str) -> tuple[np.ndarray, list]:
    """Test-set probabilities of the anchor TF-IDF + LogisticRegression model, and its class order."""
    if field == "language":
        vectorizer = TfidfVectorizer(analyzer="char", ngram_range=(1, 3), min_df=2, sublinear_tf=True)
    else:
        vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    features = vectorizer.fit_transform(train_text)
    classifier = LogisticRegression(C=10, max_iter=2000).fit(features, train_y)
    return classifier.predict_proba(vectorizer.transform(test_text)), list(classifier.classes_)


def scores(y: list, probs: np.ndarray, classes: list) -> dict[str, float]:
    predicted = [classes[i] for i in probs.argmax(1)]
    return {
        "accuracy": accuracy_score(y, predicted),
        "macro_f1": f1_score(y, predicted, average="macro"),
        "log_loss": log_loss(y, np.clip(probs, 1e-12, 1.0), labels=classes),
    }


def jev_probabilities(decider: Decider, task: str, inputs: list[dict]) -> tuple[dict[str, np.ndarray], dict[str, list]]:
    results = decider.decide_batch(task, inputs)
    fields = decider.tasks[task].spec.closed_fields
    probs = {f.name: np.array([[r.probs[f.name][v] for v in f.values] for r in results]) for f in fields}
    return probs, {f.name: list(f.values) for f in fields}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, default=Path("data"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    decider = Decider.load(args.model)
    rows, results = [], {}
    for task, (text_key, fields) in TASKS.items():
        train = list(read_jsonl(args.data / task / "train.jsonl"))
        test = list(read_jsonl(args.data / task / "test.jsonl"))
        started = time.perf_counter()
        jev_probs, jev_values = jev_probabilities(decider, task, [r["input"] for r in test])
        seconds = time.perf_counter() - started
        print(f"{task}: Jev decided {len(test)} test rows in {seconds:.1f} s")
        for field in fields:
            y = [r["label"][field] for r in test]
            base_probs, classes = baseline(
                [r["input"][text_key] for r in train], [r["label"][field] for r in train],
                [r["input"][text_key] for r in test], field,
            )
            ours, theirs = scores(y, jev_probs[field], jev_values[field]), scores(y, base_probs, classes)
            results[f"{task}.{field}"] = {"jev": ours, "tfidf_logreg": theirs, "n_test": len(test)}
            rows.append((task, field, ours, theirs))
            print(task, field, "jev", ours, "baseline", theirs)

    lines = [
        f"Test splits; Jev = `{args.model}` (raw head probabilities), baseline = TF-IDF + LogisticRegression "
        "trained on the same train split.",
        "",
        "| task | field | Jev acc % | baseline acc % | Jev macro-F1 % | baseline macro-F1 % | Jev log-loss "
        "| baseline log-loss |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for task, field, ours, theirs in rows:
        lines.append(
            f"| {task} | {field} | {100 * ours['accuracy']:.1f} | {100 * theirs['accuracy']:.1f} | "
            f"{100 * ours['macro_f1']:.1f} | {100 * theirs['macro_f1']:.1f} | {ours['log_loss']:.3f} | "
            f"{theirs['log_loss']:.3f} |"
        )
    markdown = "\n".join(lines)
    print(markdown)
    if not args.no_write:
        from benchmarks.report import write_results

        write_results("accuracy", {"fields": results}, markdown)


if __name__ == "__main__":
    main()
