"""Does teaching the language model to write the answer cost the heads anything? Raw head scores on test.

Compares arms of decider folders that differ only in their training objective, each arm one or
more training seeds, e.g. the same base continued for one epoch with and without `--answer-weight`:

    python -m benchmarks.answer_ablation --arm w0=runs/cont-heads,runs/cont-heads-s1 \
        --arm w0.3=runs/cont-answer03,runs/cont-answer03-s1

The first arm is the baseline. Each other arm's accuracy difference comes with a 95% paired
bootstrap interval over test rows (a row's correctness averaged over the arm's seeds), which
measures how much the test split's sampling alone could move it; the spread between seeds shows
how much training noise does. `--dense` scores with every key selected instead of the indexers'
top-k, which separates what the backbone learned from what the indexers' selection costs.
`--answer-loss` also measures what the other side of the trade buys: how well each arm writes its
answers, as the mean cross-entropy per answer token on the test splits.
"""

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from benchmarks.report import write_results
from jev.calibration.metrics import nll
from jev.engine.answer import AnswerTokens
from jev.engine.decider import Decider
from jev.schema import Task
from jev.train.calibrate import raw_probabilities
from jev.train.examples import read_examples

TASKS = ("mail", "chat")
BOOTSTRAP_SAMPLES = 10_000
ANSWER_BATCH = 16


@dataclass
class FieldScores:
    """One folder's raw head scores on one field: each test row's correctness, and the NLL."""

    correct: np.ndarray
    nll: float


def load(folder: Path, dense: bool = False) -> Decider:
    """A decider folder to score; `dense` selects every key instead of the indexers' top-k."""
    decider = Decider.load(folder, check_policies=False)
    if dense:
        for layer in decider.model.backbone.layers:
            layer.self_attn.index_topk = decider.model.config.max_position_embeddings
    return decider


def head_scores(decider: Decider, data: Path) -> dict[str, FieldScores]:
    """Per-row correctness and NLL of every closed field on the test splits."""
    scores = {}
    for name in TASKS:
        task = decider.tasks[name]
        examples, _ = read_examples(data / name / "test.jsonl", task, lambda t, d: decider.encode(t, d).token_ids)
        raw = raw_probabilities(decider, task, examples)
        for spec in task.spec.closed_fields:
            y = np.array([e.label[spec.name] for e in examples])
            scores[f"{name}.{spec.name}"] = FieldScores(raw[spec.name].argmax(axis=1) == y, nll(raw[spec.name], y))
    return scores


def answer_loss(decider: Decider, task: Task, path: Path) -> float:
    """Mean cross-entropy per answer token of the rows in `path`, each answer written after its input."""
    answer = AnswerTokens(task.spec, decider.tokenizer, decider.model.config.eos_token_id)
    examples, _ = read_examples(path, task, lambda t, d: decider.encode(t, d).token_ids, answer=answer.encode)
    total, tokens = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(examples), ANSWER_BATCH):
            batch = examples[start : start + ANSWER_BATCH]
            count = sum(len(e.answer_ids) for e in batch)
            mean = decider.decision_model.answer_loss([e.token_ids for e in batch], [e.answer_ids for e in batch])
            total, tokens = total + float(mean) * count, tokens + count
    return total / tokens


def answer_losses(decider: Decider, data: Path) -> dict[str, float]:
    """The decider's answer loss on each task's test split."""
    return {name: answer_loss(decider, decider.tasks[name], data / name / "test.jsonl") for name in TASKS}


def paired_interval(correct: np.ndarray, baseline: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of mean(correct - baseline), resampling rows with their pairs."""
    diff = correct.astype(float) - baseline.astype(float)
    rows = np.random.default_rng(seed).integers(0, len(diff), (BOOTSTRAP_SAMPLES, len(diff)))
    low, high = np.quantile(diff[rows].mean(axis=1), [0.025, 0.975])
    return float(low), float(high)


def parse_arm(text: str) -> tuple[str, list[Path]]:
    name, _, folders = text.partition("=")
    if not name or not folders:
        raise argparse.ArgumentTypeError(f"expected NAME=FOLDER[,FOLDER...], got {text!r}")
    return name, [Path(f) for f in folders.split(",")]


def summarise(arms: dict[str, list[dict[str, FieldScores]]]) -> tuple[dict, str]:
    """Per arm and field: mean accuracy over seeds, each seed's accuracy, mean NLL, and the paired
    difference from the first arm with its bootstrap interval."""
    names = list(arms)
    fields = list(arms[names[0]][0])
    per_row = {arm: {f: np.mean([s[f].correct for s in runs], axis=0) for f in fields} for arm, runs in arms.items()}
    results: dict[str, dict] = {}
    lines = ["| field | " + " | ".join(f"`{a}` acc % (per seed) / NLL" for a in names)
             + "".join(f" | `{a}` - `{names[0]}` [95% CI], points" for a in names[1:]) + " |",
             "|---|" + "---|" * (2 * len(names) - 1)]
    for field in fields:
        cells, deltas = [], []
        for arm, runs in arms.items():
            seeds = [100 * s[field].correct.mean() for s in runs]
            mean_nll = float(np.mean([s[field].nll for s in runs]))
            entry = {"accuracy": float(np.mean(seeds)), "seeds": seeds, "nll": mean_nll}
            cells.append(f"{np.mean(seeds):.1f} ({', '.join(f'{a:.1f}' for a in seeds)}) / {mean_nll:.3f}")
            if arm != names[0]:
                low, high = paired_interval(per_row[arm][field], per_row[names[0]][field])
                delta = entry["accuracy"] - results[names[0]][field]["accuracy"]
                entry["difference"] = {"points": delta, "ci95": [100 * low, 100 * high]}
                deltas.append(f"{delta:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]")
            results.setdefault(arm, {})[field] = entry
        lines.append(f"| {field} | " + " | ".join(cells + deltas) + " |")
    return results, "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arm", type=parse_arm, action="append", required=True,
                        help="NAME=FOLDER[,FOLDER...]: one folder per training seed; the first arm is the baseline")
    parser.add_argument("--data", type=Path, default=Path("data"))
    parser.add_argument("--dense", action="store_true", help="attend to every key, not the indexers' top-k")
    parser.add_argument("--section", help="the docs/benchmarks.md section to write (default: answer_ablation, "
                        "or answer_ablation_dense with --dense)")
    parser.add_argument("--answer-loss", action="store_true",
                        help="also measure each arm's answer loss per token on the test splits (dense attention)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    arms: dict[str, list[dict[str, FieldScores]]] = {}
    written: dict[str, list[dict[str, float]]] = {}
    for name, folders in args.arm:
        for folder in folders:
            decider = load(folder, args.dense)
            arms.setdefault(name, []).append(head_scores(decider, args.data))
            if args.answer_loss:
                written.setdefault(name, []).append(answer_losses(decider, args.data))
    results, table = summarise(arms)
    folders = {name: [str(f) for f in fs] for name, fs in args.arm}
    attention = "dense attention (every key)" if args.dense else "the indexers' top-k attention, as served"
    markdown = (f"Raw heads (before calibration) on the test splits, with {attention}; intervals are paired "
                "bootstraps over test rows.\n\n" + table)
    if written:
        rows = [f"| `{name}` | " + " | ".join(f"{np.mean([s[t] for s in runs]):.2f}" for t in TASKS) + " |"
                for name, runs in written.items()]
        markdown += ("\n\nHow well each arm writes its answers: mean cross-entropy per answer token on the test "
                     "splits, in nats (mean over seeds).\n\n| arm | " + " | ".join(TASKS) + " |\n|---|"
                     + "---|" * len(TASKS) + "\n" + "\n".join(rows))
    print(markdown)
    if not args.no_write:
        name = args.section or ("answer_ablation_dense" if args.dense else "answer_ablation")
        write_results(name, {"arms": folders, "dense": args.dense, "fields": results, "answer_loss": written},
                      markdown)


if __name__ == "__main__":
    main()
