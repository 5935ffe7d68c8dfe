"""How much of a plain decode step is its matrix products, per weight format, at batch 1.

A decode step multiplies one row by every large weight matrix once (`jev.model.weights.large_linears`:
each layer's q, kv-down, output and MLP projections, then the LM head), so on a CPU its floor is
streaming those weights. This times that sweep alone over the model's own matrices, stored three
ways: float32 (`F.linear`), float16 (fbgemm, what `--weights fp16` serves) and 4-bit groups of 32
(torch's CPU int4 weight-only kernel, the format nearest llama.cpp's Q4_1). Beside it, the whole
plain step of the same model, float32 and fp16, as `benchmarks/decode_anchor.py` times it: what
is not the products is the step's other work (attention, norms, RoPE, cache writes, sampling).

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
from jev.model.weights import large_linears, store_weights

INT4_GROUP = 32


def step_matrices(model: nn.Module) -> list[torch.Tensor]:
    """The weights a decode step multiplies by, in the order it does."""
    return [module.weight.detach() for _, module in large_linears(model)]


def int4_product(weight: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """`x W^T` with W in asymmetric 4-bit groups of INT4_GROUP along its input dimension."""
    out_dim, in_dim = weight.shape
    groups = weight.float().view(out_dim, in_dim // INT4_GROUP, INT4_GROUP)
    low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
    scale = ((high - low) / 15).clamp(min=1e-8)
    codes = ((groups - low) / scale).round().clamp(0, 15).to(torch.int32).view(out_dim, in_dim)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
    # torch's convention: w = (code - 8) * scale + zero
    scales_and_zeros = torch.stack((scale.view(out_dim, -1), (low + 8 * scale).view(out_dim, -1)), -1)
    scales_and_zeros = scales_and_zeros.transpose(0, 1).contiguous()
    return lambda x: torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, INT4_GROUP, scales_and_zeros)


def products(matrices: list[torch.Tensor], fmt: str) -> tuple[list[Callable[[torch.Tensor], torch.Tensor]], int]:
    """One callable per matrix in format `fmt`, and the bytes they stream."""
    if fmt == "float32":
        return [lambda x, w=w: F.linear(x, w) for w in matrices], sum(4 * w.numel() for w in matrices)
    if fmt == "fp16":
        packs = [torch.ops.quantized.linear_prepack_fp16(w.float(), None) for w in matrices]
        calls = [lambda x, p=p: torch.ops.quantized.linear_dynamic_fp16(x, p) for p in packs]
        return calls, sum(2 * w.numel() for w in matrices)
    calls = [int4_product(w) for w in matrices]
    return calls, sum(w.numel() // 2 + 8 * w.numel() // INT4_GROUP for w in matrices)  # codes, float32 scale and zero


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, default=Path("data/mail/test.jsonl"))
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()

    decider = Decider.load(args.model, check_policies=False, speculative=False)
    model = decider.model
    prompt = subject_prompts(decider, args.data, 1)[0][0]
    matrices = step_matrices(model)
    inputs = [torch.randn(1, w.shape[1]) for w in matrices]
    rows: dict[str, dict[str, float | None]] = {}
    with torch.inference_mode():
        for fmt in ("float32", "fp16", "int4"):
            calls, size = products(matrices, fmt)
            sweep = [(call, x) for call, x in zip(calls, inputs, strict=True)]
            seconds = median_time(lambda sweep=sweep: [call(x) for call, x in sweep], args.repeats)
            rows[fmt] = {"megabytes": size / 1e6, "products_ms": 1000 * seconds, "step_ms": None}
            print(fmt, rows[fmt], flush=True)
        for fmt in ("float32", "fp16"):
            store_weights(model, fmt)
            jev_rate(model, prompt, 4, None, 0)  # warm-up
            rows[fmt]["step_ms"] = 1000 / jev_rate(model, prompt, args.new_tokens, None, 0)
            print(fmt, rows[fmt], flush=True)

    lines = [
        f"Batch 1, `{args.model}`: the {len(matrices)} matrices a decode step multiplies by, swept once (median of "
        f"{args.repeats}), and the whole plain step (greedy, {args.new_tokens} tokens after a test mail's subject "
        "prompt, as in the decode table above).",
        "",
        "| weights | MB streamed | products alone, ms | GB/s | whole step, ms | products' share |",
        "|---|---|---|---|---|---|",
    ]
    for fmt, row in rows.items():
        step = row["step_ms"]
        share = f"{100 * row['products_ms'] / step:.0f}%" if step else "-"
        lines.append(f"| {fmt} | {row['megabytes']:.0f} | {row['products_ms']:.1f} | "
                     f"{row['megabytes'] / row['products_ms']:.1f} | {f'{step:.1f}' if step else '-'} | {share} |")
    markdown = "\n".join(lines)
    print(markdown)
    if not args.no_write:
        from benchmarks.report import write_results

        write_results("step_products", {"rows": rows}, markdown)


if __name__ == "__main__":
    main()
