"""Fine-tuning recipes side by side: each decider folder's kept validation accuracy, its training
wall time and the command that trained it, read from its `jev.json` training record.

    python -m benchmarks.recipe runs/recipe/L27attn runs/recipe/L24attn

Train the folders with `jev train decide` (the record holds every setting); the table compares
whatever they differ in.
"""

import argparse
import json
import shlex
from pathlib import Path

from benchmarks.report import write_results


def command_of(settings: dict) -> str:
    """The `jev train decide` command a training record's settings correspond to."""
    words = ["jev", "train", "decide", "--base", settings["base"]]
    for task in settings["tasks"].values():
        words += ["--task", task["reference"], "--data", task["train"], "--valid", task["valid"]]
    for key in ("epochs", "batch_size", "lr", "max_input_tokens", "seed", "answer_weight", "frozen_layers"):
        if settings.get(key) is not None:
            words += [f"--{key.replace('_', '-')}", str(settings[key])]
    if settings.get("frozen_mlps"):
        words.append("--frozen-mlps")
    if settings.get("rendering", "fields") != "fields":
        words += ["--rendering", settings["rendering"]]
    return shlex.join(words)


def row_of(folder: Path) -> tuple[str, dict[str, float], dict[str, float | None], str]:
    training = json.loads((folder / "jev.json").read_text())["training"]
    kept = training["epochs"][training["best_epoch"] - 1]
    scores = {
        f"{task}.{key.removeprefix('accuracy.')}": value
        for task in training["settings"]["tasks"]
        for key, value in kept[task].items()
        if key.startswith("accuracy.") or key == "loss"
    }
    seconds = {"wall": training["seconds"], "pass": training.get("lower_states_seconds")}
    return folder.name, scores, seconds, command_of(training["settings"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path, help="decider folders written by jev train decide")
    parser.add_argument("--name", default="recipe", help="the results file and docs section to write")
    args = parser.parse_args(argv)
    rows = [row_of(folder) for folder in args.folders]
    fields = sorted({name for _, scores, _, _ in rows for name in scores})
    lines = ["Validation loss and accuracy of the kept epoch; the run's recorded seconds, and of them the one-off pass",
             "to the query layer (\"-\": a record from before the pass was counted apart, whose seconds are the",
             "steps and evaluations only).", "",
             "| run | " + " | ".join(fields) + " | seconds | of them the pass |", "|---|" + "---|" * (len(fields) + 2)]
    for name, scores, seconds, _ in rows:
        cells = [("-" if f not in scores else f"{scores[f]:.3f}" if f.endswith(".loss") else f"{100 * scores[f]:.1f}%")
                 for f in fields]
        cached = "-" if seconds["pass"] is None else f"{seconds['pass']:.0f}"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {seconds['wall']:.0f} | {cached} |")
    lines.append("")
    lines += [f"- {name}: `{command}`" for name, _, _, command in rows]
    markdown = "\n".join(lines)
    print(markdown)
    write_results(args.name, {"runs": [{"name": n, "scores": s, "seconds": t, "command": c} for n, s, t, c in rows]},
                  markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
