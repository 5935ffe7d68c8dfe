"""How much of a plain decode step is its matrix products, per weight format, at batch 1.

A decode step multiplies one row by every large weight matrix once (`jev.model.weights.large_linears`:
each layer's q, kv-down, output and MLP projections, then the LM head), so on a CPU its floor is
streaming those weights. This times that sweep alone over the model's own matrices, in the forms a
decode step reads them: float32 (`F.linear`), fp16 (fbgemm, `--weights fp16`) and mixed (what
`--weights mixed` extends a cache with: torch's int4 kernel for the weights on a 4-bit grid, the
base's Q4_1 MLPs, and fp16 for the rest). Beside it, the whole plain step of the same model in each
form, as `benchmarks/decode_anchor.py` times it: what is not the products is the step's other work
(attention, norms, RoPE, cache writes, sampling).

A second table sweeps the same matrices by the number of rows a pass multiplies (sequences times
the tokens each extends by): mixed's per-row forms (fp16 and int4) against bfloat16 in the fixed
blocks `mixed` uses for passes over 8 or more sequences (`jev.model.weights.extending_block`).

    python -m benchmarks.step_products --model models/default
"""

import argparse
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.decode_anchor import jev_rate
from benchmarks.report import median_time
from benchmarks.speculative import subject_prompts
from jev.decide.decider import Decider
from jev.model.weights import (
    Bf16Linear,
    Fp16Linear,
    Int4Linear,
    extending_block,
    int4_grid,
    large_linears,
    storable_weights,
)

FORMATS = ("float32", "fp16", "mixed")
ROWS = (1, 4, 8, 16, 32, 64, 128)


def step_linears(model: nn.Module) -> list[nn.Linear]:
    """The float32 linears a decode step multiplies by, in the order it does."""
    return [module for _, module in large_linears(model)]


def product(linear: nn.Linear, fmt: str) -> tuple[Callable[[torch.Tensor], torch.Tensor], int]:
    """`linear` in the form `fmt` reads it when extending a cache, and the bytes it streams."""
    if fmt == "float32":
        return (lambda x: F.linear(x, linear.weight)), 4 * linear.weight.numel()
    grid = int4_grid(linear.weight) if fmt == "mixed" else None
    if grid is None:
        return Fp16Linear(linear), 2 * linear.weight.numel()
    rows = linear.weight.shape[0]
    return Int4Linear(grid), linear.weight.numel() // 2 + 4 * rows * grid[1].shape[1]  # codes, bf16 scale and zero


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, default=Path("data/mail/test.jsonl"))
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()
    if "mixed" not in storable_weights():
        parser.error("it times mixed weights, which this CPU cannot store (jev.model.weights.bfloat16_packing)")

    decider = Decider.load(args.model, check_policies=False, speculative=False, weights="float32")
    model = decider.model
    prompt = subject_prompts(decider, args.data, 1)[0][0]
    linears = step_linears(model)
    inputs = [torch.randn(1, linear.weight.shape[1]) for linear in linears]
    rows: dict[str, dict[str, float]] = {}
    with torch.inference_mode():
        for fmt in FORMATS:
            calls, sizes = zip(*(product(linear, fmt) for linear in linears), strict=True)
            sweep = list(zip(calls, inputs, strict=True))
            seconds = median_time(lambda sweep=sweep: [call(x) for call, x in sweep], args.repeats)
            served = Decider.load(args.model, check_policies=False, speculative=False, weights=fmt, replay=True).model
            jev_rate(served, prompt, 4, None, 0)  # warm-up
            step_ms = 1000 / jev_rate(served, prompt, args.new_tokens, None, 0)[0]
            rows[fmt] = {"megabytes": sum(sizes) / 1e6, "products_ms": 1000 * seconds, "step_ms": step_ms}
            print(fmt, rows[fmt], flush=True)

    by_rows = products_by_rows(linears, args.repeats)
    lines = [
        f"Batch 1, `{args.model}`: the {len(linears)} matrices a decode step multiplies by, swept once (median of "
        f"{args.repeats}), and the whole plain step (greedy, {args.new_tokens} tokens after a test mail's subject "
        "prompt, as in the decode table above).",
        "",
        "| weights | MB streamed | products alone, ms | GB/s | whole step, ms | products' share |",
        "|---|---|---|---|---|---|",
    ]
    for fmt, row in rows.items():
        lines.append(f"| {fmt} | {row['megabytes']:.0f} | {row['products_ms']:.1f} | "
                     f"{row['megabytes'] / row['products_ms']:.1f} | {row['step_ms']:.1f} | "
                     f"{100 * row['products_ms'] / row['step_ms']:.0f}% |")
    lines += [
        "",
        "The same products by the rows a pass multiplies, ms (median of "
        f"{args.repeats}): mixed's per-row forms, and bfloat16 in the block `mixed` takes for that many sequences.",
        "",
        "| rows | fp16 and int4 | bfloat16 | bfloat16 block |",
        "|---|---|---|---|",
    ]
    for count, row in by_rows.items():
        lines.append(f"| {count} | {row['per_row_ms']:.1f} | {row['blocks_ms']:.1f} | {row['block']} |")
    markdown = "\n".join(lines)
    print(markdown)
    if not args.no_write:
        from benchmarks.report import write_results

        write_results("step_products", {"rows": rows, "by_rows": by_rows}, markdown)


def products_by_rows(linears: list[nn.Linear], repeats: int) -> dict[int, dict[str, float]]:
    """Milliseconds of one sweep over `linears` at each of ROWS rows: fp16/int4 (mixed's few-sequence
    form) and bfloat16 in `extending_block`'s block (its many-sequence form; 16 below 8 sequences)."""
    per_row = [product(linear, "mixed")[0] for linear in linears]
    blocked = [Bf16Linear(linear) for linear in linears]
    found = {}
    with torch.inference_mode():
        for count in ROWS:
            block = extending_block(count) or extending_block(16)
            inputs = [torch.randn(count, linear.weight.shape[1]) for linear in linears]
            pairs = list(zip(per_row, blocked, inputs, strict=True))
            few = median_time(lambda pairs=pairs: [call(x) for call, _, x in pairs], repeats)
            many = median_time(lambda pairs=pairs, b=block: [f.in_blocks_of(x, b) for _, f, x in pairs], repeats)
            found[count] = {"per_row_ms": 1000 * few, "blocks_ms": 1000 * many, "block": block}
            print(count, found[count], flush=True)
    return found


if __name__ == "__main__":
    main()
