"""Decode and prefill time of Jev's MLA (dense and + DSA) against transformers on the same weights.

A ~7M-parameter DeepSeek-V3.2 checkpoint (hidden 256, 4 layers, 4 heads, kv_lora_rank 64,
qk_rope 16, index_topk 64, vocab 8192) is written once; Jev loads it twice (DSA as configured,
and dense with the indexer's top-k above every context) and transformers loads it once. Caches
are built by chunked prefill, then single decode steps are timed at a fixed context. The DSA
parts (indexer, top-k, sparse core) and the dense core are also timed alone, per layer, and every
decode time is set against a bandwidth roofline: (weights + cache bytes read) / measured copy rate.

    python -m benchmarks.attention                      # the full table (about 10 minutes)
    python -m benchmarks.attention --contexts 256 1024 --prefill 1024 --no-transformers
"""

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch
from jev.kernels import ops

from benchmarks.report import median_time, write_results
from jev.model import Model, ModelConfig
from jev.model.cost import decode_bytes_per_layer

BENCH_CONFIG = ModelConfig(
    vocab_size=8192, hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=4,
    q_lora_rank=64, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
    index_n_heads=4, index_head_dim=16, index_topk=64, first_k_dense_replace=4, max_position_embeddings=32768,
)
PREFILL_CHUNK = 1024


def copy_bandwidth() -> float:
    """Bytes per second of a large tensor copy (read + write), the roofline's memory rate."""
    src = torch.empty(1 << 26)
    dst = torch.empty_like(src)
    seconds = median_time(lambda: dst.copy_(src), repeats=5)
    return 2 * src.numel() * src.element_size() / seconds


def write_checkpoint(folder: Path) -> None:
    torch.manual_seed(0)
    model = Model(BENCH_CONFIG)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(std=0.05)
    model.save_pretrained(folder)


def jev_decode_time(model: Model, context: int, steps: int) -> float:
    """Median seconds of one decode step with `context` tokens already cached."""
    ids = torch.randint(0, BENCH_CONFIG.vocab_size, (1, context + 1))
    cache = model.new_cache(1, context + 1)
    with torch.inference_mode():
        for start in range(0, context, PREFILL_CHUNK):
            model(ids[:, start : min(start + PREFILL_CHUNK, context)], cache=cache)

        def step() -> None:
            cache.truncate([context])
            model(ids[:, context:], cache=cache)

        return median_time(step, repeats=steps, warmup=2)


def transformers_decode_time(folder: Path, context: int, steps: int) -> float:
    from transformers import DeepseekV32ForCausalLM, DynamicCache

    model = DeepseekV32ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = torch.randint(0, BENCH_CONFIG.vocab_size, (1, context + steps + 1))
    cache = DynamicCache(config=model.config)
    times = []
    with torch.inference_mode():
        for start in range(0, context, PREFILL_CHUNK):
            model(ids[:, start : min(start + PREFILL_CHUNK, context)], cache=cache, use_cache=True)
        for t in range(context, context + steps):
            begin = time.perf_counter()
            model(ids[:, t : t + 1], cache=cache, use_cache=True)
            times.append(time.perf_counter() - begin)
    return statistics.median(times)


def prefill_time(forward: Callable[[torch.Tensor], object], length: int, repeats: int) -> float:
    ids = torch.randint(0, BENCH_CONFIG.vocab_size, (1, length))
    with torch.inference_mode():
        return median_time(lambda: forward(ids), repeats=repeats, warmup=0 if repeats == 1 else 1)


def core_times(context: int) -> dict[str, float]:
    """One layer's attention parts alone at decode (one query), on random tensors of the model's shapes."""
    cfg = BENCH_CONFIG
    heads, d_c, d_r = cfg.num_attention_heads, cfg.kv_lora_rank, cfg.qk_rope_head_dim
    kv = torch.randn(1, context, d_c + d_r)
    q_latent, q_rope = torch.randn(1, 1, heads, d_c), torch.randn(1, 1, heads, d_r)
    q_index, weights = torch.randn(1, 1, cfg.index_n_heads, cfg.index_head_dim), torch.randn(1, 1, cfg.index_n_heads)
    keys = torch.randn(1, context, cfg.index_head_dim)
    positions = torch.tensor([[context - 1]])
    scores = ops.indexer_logits(q_index, weights, keys, positions, 0.25)
    top = ops.select_topk(scores, cfg.index_topk)
    repeats = 50
    return {
        "indexer": median_time(lambda: ops.indexer_logits(q_index, weights, keys, positions, 0.25), repeats),
        "topk": median_time(lambda: ops.select_topk(scores, cfg.index_topk), repeats),
        "sparse_core": median_time(lambda: ops.sparse_mla_attention(q_latent, q_rope, kv, top, 0.2), repeats),
        "dense_core": median_time(lambda: ops.mla_attention(q_latent, q_rope, kv, positions, 0.2), repeats),
    }


def roofline(context: int, weight_bytes: int, bandwidth: float) -> dict[str, float]:
    """Lower bounds on a decode step: every weight and every cache byte read once at the copy rate."""
    cache = decode_bytes_per_layer(BENCH_CONFIG, context, 4)
    layers = BENCH_CONFIG.num_hidden_layers
    return {
        "dense": (weight_bytes + layers * cache["mla_dense"]) / bandwidth,
        "dsa": (weight_bytes + layers * cache["mla_dsa"]) / bandwidth,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[256, 1024, 4096, 16384])
    parser.add_argument("--prefill", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--steps", type=int, default=20, help="timed Jev decode steps per context")
    parser.add_argument("--hf-steps", type=int, default=3, help="timed transformers decode steps per context")
    parser.add_argument("--no-transformers", action="store_true", help="skip the transformers baseline")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="jev-bench-"))
    write_checkpoint(folder)
    dsa = Model.from_pretrained(folder)
    dense = Model(replace(BENCH_CONFIG, index_topk=1 << 30)).eval()
    dense.load_state_dict(dsa.state_dict())
    weight_bytes = sum(p.numel() * p.element_size() for p in dsa.parameters())
    bandwidth = copy_bandwidth()
    n_params = sum(p.numel() for p in dsa.parameters())
    print(f"{n_params / 1e6:.2f}M parameters, copy bandwidth {bandwidth / 1e9:.1f} GB/s")

    decode = []
    for context in args.contexts:
        row = {
            "context": context,
            "jev_dense_ms": 1e3 * jev_decode_time(dense, context, args.steps),
            "jev_dsa_ms": 1e3 * jev_decode_time(dsa, context, args.steps),
            "transformers_ms": None
            if args.no_transformers
            else 1e3 * transformers_decode_time(folder, context, args.hf_steps),
            "parts_ms": {name: 1e3 * t for name, t in core_times(context).items()},
            "roofline_ms": {name: 1e3 * t for name, t in roofline(context, weight_bytes, bandwidth).items()},
        }
        decode.append(row)
        print(row)

    prefill = []
    for length in args.prefill:
        row = {
            "length": length,
            "jev_dense_ms": 1e3 * prefill_time(dense, length, repeats=3),
            "jev_dsa_ms": 1e3 * prefill_time(dsa, length, repeats=3),
            "transformers_ms": None,
        }
        if not args.no_transformers:
            from transformers import DeepseekV32ForCausalLM

            hf = DeepseekV32ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
            row["transformers_ms"] = 1e3 * prefill_time(partial(hf, use_cache=False), length, repeats=1)
        prefill.append(row)
        print(row)

    results = {"parameters": n_params, "copy_bandwidth_gbs": bandwidth / 1e9,
               "decode": decode, "prefill": prefill}
    markdown = render(results)
    print(markdown)
    if not args.no_write:
        write_results("attention", results, markdown)


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _ratio(numerator: float | None, denominator: float) -> str:
    return "n/a" if numerator is None else f"{numerator / denominator:.0f}x"


def render(results: dict) -> str:
    lines = [
        f"Model: {results['parameters'] / 1e6:.2f}M parameters (hidden 256, 4 layers, 4 heads, kv_lora_rank 64, "
        f"qk_rope 16, index_topk 64, index_head_dim 16, vocab 8192), float32, batch 1. "
        f"Copy bandwidth {results['copy_bandwidth_gbs']:.1f} GB/s.",
        "",
        "**Decode step** (ms, median; roofline = (weights + cache bytes read) / copy bandwidth):",
        "",
        "| context | Jev dense MLA | Jev MLA + DSA | transformers | speed-up (DSA vs transformers) "
        "| roofline dense / DSA | DSA time / roofline |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results["decode"]:
        roof = row["roofline_ms"]
        lines.append(
            f"| {row['context']} | {_ms(row['jev_dense_ms'])} | {_ms(row['jev_dsa_ms'])} | "
            f"{_ms(row['transformers_ms'])} | {_ratio(row['transformers_ms'], row['jev_dsa_ms'])} | "
            f"{roof['dense']:.2f} / {roof['dsa']:.2f} | {row['jev_dsa_ms'] / roof['dsa']:.1f}x |"
        )
    lines += [
        "",
        "**Attention parts of one layer at decode** (ms, median, one query token):",
        "",
        "| context | indexer | top-k | sparse core | dense core |",
        "|---|---|---|---|---|",
    ]
    for row in results["decode"]:
        parts = row["parts_ms"]
        lines.append(
            f"| {row['context']} | {parts['indexer']:.3f} | {parts['topk']:.3f} | "
            f"{parts['sparse_core']:.3f} | {parts['dense_core']:.3f} |"
        )
    lines += [
        "",
        "**Prefill** (ms, one forward pass over the whole prompt):",
        "",
        "| length | Jev dense MLA | Jev MLA + DSA | transformers | speed-up (DSA vs transformers) |",
        "|---|---|---|---|---|",
    ]
    for row in results["prefill"]:
        lines.append(
            f"| {row['length']} | {_ms(row['jev_dense_ms'])} | {_ms(row['jev_dsa_ms'])} | "
            f"{_ms(row['transformers_ms'])} | {_ratio(row['transformers_ms'], row['jev_dsa_ms'])} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
