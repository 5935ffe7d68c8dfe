"""A user's own task trained from the default model, against TF-IDF and MiniLM + LR on the same splits.

The task is `examples/sotu.py` (State of the Union passages: era and party), built from an npm
package, trained and calibrated by the same commands a user runs:

    jev train decide --base models/default --task examples.sotu:TASK --data ... --valid ... --out OUT
    jev calibrate --model OUT --task sotu --data calib.jsonl

then scored on test beside both anchors, exactly as `benchmarks/accuracy.py` scores the shipped tasks.
A folder already trained at `--out` is scored again without retraining. `--train-rows` and
`--valid-rows` size those splits (the test split is the same rows whatever they are), and `--name`
keeps a run of another size in its own section:

    python -m benchmarks.own_task --out runs/own/sotu-model
    python -m benchmarks.own_task --data runs/own5000 --out runs/own5000/sotu-model --epochs 3 \
        --train-rows 5000 --valid-rows 1000 --name own_task_5000
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.accuracy import evaluate_task, render
from examples.sotu import PACKAGE, SIZES, build
from jev.data.fetch import fetch_package
from jev.decide.decider import Decider
from jev.evaluate.minilm import MiniLMEncoder

JEV = [sys.executable, "-m", "jev.cli"]


def run(command: list[str]) -> float:
    """Run one jev command (`JEV` + arguments) as a user would; its wall seconds."""
    print("$ jev", " ".join(command[len(JEV):]), flush=True)
    started = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, default=Path("runs/own"), help="the rows go to DATA/sotu/")
    parser.add_argument("--out", type=Path, default=Path("runs/own/sotu-model"))
    parser.add_argument("--raw", type=Path, default=Path("runs/raw"), help="where the npm package is kept")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max-input-tokens", type=int, default=256)
    parser.add_argument("--frozen-layers", type=int, default=None, help="passed on to `jev train decide`")
    parser.add_argument("--patience", type=int, default=1, help="passed on to `jev train decide`")
    parser.add_argument("--train-rows", type=int, default=SIZES["train"], help="rows of the train split")
    parser.add_argument("--valid-rows", type=int, default=SIZES["valid"], help="rows of the valid split")
    parser.add_argument("--name", default="own_task", help="the docs/benchmarks.md section and results file")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()

    rows = args.data / "sotu"
    sizes = {**SIZES, "train": args.train_rows, "valid": args.valid_rows}
    counts = build(fetch_package(PACKAGE, args.raw), rows, sizes)
    print("rows per split:", counts)
    train_seconds = calibrate_seconds = None
    if not (args.out / "jev.json").exists():
        train_seconds = run([
            *JEV, "train", "decide", "--base", str(args.base), "--task", "examples.sotu:TASK",
            "--data", str(rows / "train.jsonl"), "--valid", str(rows / "valid.jsonl"), "--out", str(args.out),
            "--epochs", str(args.epochs), "--max-input-tokens", str(args.max_input_tokens),
            "--patience", str(args.patience),
            *([] if args.frozen_layers is None else ["--frozen-layers", str(args.frozen_layers)]),
        ])
        calibrate_seconds = run([
            *JEV, "calibrate", "--model", str(args.out), "--task", "sotu", "--data", str(rows / "calib.jsonl"),
        ])
    manifest = json.loads((args.out / "jev.json").read_text())
    training = manifest["training"]
    decider = Decider.load(args.out, speculative=False)
    results = {"sotu": evaluate_task(decider, "sotu", args.data, MiniLMEncoder.load().encode)}
    markdown = "\n".join([
        f"Rows per split: {', '.join(f'{split} {n}' for split, n in counts.items())} (`examples/sotu.py`; "
        "whole addresses per split). Trained from "
        f"`{args.base}` (query layer {manifest['query_layer']}), "
        f"{args.epochs} epochs, patience {args.patience}, at most {args.max_input_tokens} input tokens; kept epoch "
        f"{training['best_epoch']}. Training: {training['seconds'] / 60:.1f} min by the run's own record, "
        f"{training['lower_states_seconds'] / 60:.1f} of them the one-off pass to layer {manifest['query_layer']}"
        + (f", {train_seconds / 60:.1f} min of wall time for the whole command; `jev calibrate` "
           f"{calibrate_seconds:.0f} s." if train_seconds else "."),
        "",
        render(results, args.out),
    ])
    print(markdown)
    if not args.no_write:
        from benchmarks.report import write_results

        write_results(args.name, {"tasks": results, "rows": counts, "training": training,
                                   "train_wall_seconds": train_seconds}, markdown)


if __name__ == "__main__":
    main()
