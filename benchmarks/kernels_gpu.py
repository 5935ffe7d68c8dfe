"""Check and time Jev's Triton attention kernels on a CUDA GPU against their torch references.

At DeepSeek-V3.2 sizes (kv_lora_rank 512, rope 64, 128 heads; indexer 64 heads x 128; top-k 2048;
contexts up to 32k), every kernel (`mla_decode`, `indexer_logits`, `sparse_mla`) is compared with
the torch reference in float32 and bfloat16, on ragged batches, speculative (several-token) steps,
`-1` indices and NaN in cache slots a kernel must not read. Each is then timed against the reference
(`triton.testing.do_bench`, which clears L2 before every call), and the memory-bound decode kernels
report GB/s against the H200's ~4.8 TB/s and against a measured device copy.

    python3 benchmarks/kernels_gpu.py            # everything, about 2-3 minutes on an H200
    python3 benchmarks/kernels_gpu.py --quick    # contexts up to 4k, fewer shapes

Prints markdown tables; writes `$OUT/kernels_gpu.json` when OUT is set. Runs from a bare checkout:
`jev.kernels` is loaded from `kernels/` beside this file, without importing the rest of `jev`.
Exits 2 without a CUDA device, 1 when any check fails.
"""

import argparse
import importlib
import importlib.util
import json
import os
import sys
import traceback
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

DEVICE = "cuda"
HEADS, D_C, D_R = 128, 512, 64
MLA_SCALE = (128 + 64) ** -0.5  # (qk_nope + qk_rope)^-1/2: the absorbed form keeps the model's scale
INDEX_HEADS, INDEX_DIM = 64, 128
INDEX_SCALE = INDEX_DIM**-0.5
TOPK = 2048
PEAK_BYTES_PER_S = 4.8e12  # H200 HBM3e datasheet
# Relative error bounds (max |kernel - reference| / max |reference|), the reference in float32 on
# the same (rounded) inputs. bf16 output is rounded to 8 bits of mantissa, and p is rounded to bf16
# before the p @ V product, as in every flash-attention kernel.
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}
INDEX_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 1e-3}  # bf16 products are exact in fp32


@dataclass
class Check:
    op: str
    case: str
    dtype: str
    out_rel: float
    lse_rel: float
    inf_pattern_equal: bool
    nan_safe: bool
    ok: bool
    error: str = ""


@dataclass
class Timing:
    op: str
    shape: str
    dtype: str
    triton_us: float
    torch_us: float
    bytes: int
    flops: int

    @property
    def speedup(self) -> float:
        return self.torch_us / self.triton_us

    @property
    def gb_per_s(self) -> float:
        return self.bytes / self.triton_us / 1e3

    @property
    def tflop_per_s(self) -> float:
        return self.flops / self.triton_us / 1e6


def load_kernels() -> types.SimpleNamespace:
    """Import `jev.kernels` from `kernels/` beside this script; `jev/__init__` (and its deps) is not run."""
    root = Path(__file__).resolve().parents[1]
    if "jev" not in sys.modules:
        package = types.ModuleType("jev")
        package.__path__ = [str(root / "jev")]
        sys.modules["jev"] = package
    if "jev.kernels" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "jev.kernels", root / "kernels" / "__init__.py", submodule_search_locations=[str(root / "kernels")]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["jev.kernels"] = module
        spec.loader.exec_module(module)
    names = ("reference", "triton_mla_decode", "triton_indexer", "triton_sparse_mla")
    return types.SimpleNamespace(**{name: importlib.import_module(f"jev.kernels.{name}") for name in names})


def require_gpu() -> None:
    """Exit (status 2) with a clear message unless a CUDA device and compiled (not interpreted) Triton are here."""
    problem = None
    if not torch.cuda.is_available():
        problem = "kernels_gpu.py needs a CUDA device: torch.cuda.is_available() is False (run it on a GPU machine)"
    elif importlib.util.find_spec("triton") is None:
        problem = "kernels_gpu.py needs triton, which is not installed in this python"
    elif os.environ.get("TRITON_INTERPRET", "").strip().lower() in {"1", "true", "yes", "on", "y"}:
        problem = "unset TRITON_INTERPRET: kernels_gpu.py checks and times the compiled kernels"
    if problem:
        print(problem, file=sys.stderr)
        sys.exit(2)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Max |actual - expected| / max |expected| over the entries finite in `expected` (0 when none are)."""
    finite = torch.isfinite(expected)
    if not finite.any():
        return 0.0
    diff = (actual.float()[finite] - expected.float()[finite]).abs().max()
    return float(diff / expected.float()[finite].abs().max().clamp(min=1e-30))


def same_inf(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    return bool(torch.equal(torch.isneginf(actual), torch.isneginf(expected)))


def last_positions(lengths: list[int], n_query: int) -> torch.Tensor:
    """`[B, T]` int64: the last `n_query` positions of sequences of `lengths`; -1 where a sequence is shorter."""
    ends = torch.tensor(lengths, device=DEVICE).unsqueeze(1)
    positions = ends - n_query + torch.arange(n_query, device=DEVICE)
    return torch.where(positions >= 0, positions, -1)


def latent_inputs(batch: int, n_query: int, n_keys: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """q_latent `[B, T, H, d_c]`, q_rope `[B, T, H, d_r]`, cache `[B, L, d_c + d_r]`: scaled scores of std ~1.7."""
    q_latent = torch.randn(batch, n_query, HEADS, D_C, device=DEVICE, dtype=dtype)
    q_rope = torch.randn(batch, n_query, HEADS, D_R, device=DEVICE, dtype=dtype)
    return q_latent, q_rope, torch.randn(batch, n_keys, D_C + D_R, device=DEVICE, dtype=dtype)


def index_inputs(batch: int, n_query: int, n_keys: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Indexer q `[B, T, H_I, d_I]`, float32 head weights `[B, T, H_I]` (scaled as in the model), keys `[B, L, d_I]`."""
    q = torch.randn(batch, n_query, INDEX_HEADS, INDEX_DIM, device=DEVICE, dtype=dtype)
    weights = torch.randn(batch, n_query, INDEX_HEADS, device=DEVICE) * INDEX_HEADS**-0.5
    return q, weights, torch.randn(batch, n_keys, INDEX_DIM, device=DEVICE, dtype=dtype)


def poison_after(cache: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """A copy with NaN in every slot at or past each sequence's length."""
    cache = cache.clone()
    for b, length in enumerate(lengths):
        cache[b, length:] = float("nan")
    return cache


def causal_topk(kernels: types.SimpleNamespace, positions: torch.Tensor, n_keys: int) -> torch.Tensor:
    """`[B, T, TOPK]` int32 random causal picks per query (distinct), `-1` where fewer keys are visible."""
    scores = torch.rand(*positions.shape, n_keys, device=DEVICE)
    scores = scores.masked_fill(~kernels.reference.causal_key_mask(positions, n_keys), float("-inf"))
    return kernels.reference.select_topk(scores, TOPK)


def attention_check(op: str, case: str, dtype: torch.dtype, got: tuple, want: tuple, nan_safe: bool) -> Check:
    out_rel, lse_rel = relative_error(got[0], want[0]), relative_error(got[1], want[1])
    inf_equal = same_inf(got[1], want[1])
    ok = out_rel <= TOLERANCE[dtype] and lse_rel <= TOLERANCE[dtype] and inf_equal and nan_safe
    return Check(op, case, dtype_name(dtype), out_rel, lse_rel, inf_equal, nan_safe, ok)


def check_mla_decode(kernels, case: str, lengths: list[int], n_query: int, n_keys: int, dtype: torch.dtype) -> Check:
    """Kernel on a cache NaN-poisoned past each length vs the float32 reference on the clean cache."""
    q_latent, q_rope, cache = latent_inputs(len(lengths), n_query, n_keys, dtype)
    positions = last_positions(lengths, n_query)
    got = kernels.triton_mla_decode.mla_decode(q_latent, q_rope, poison_after(cache, lengths), positions, MLA_SCALE)
    want = kernels.reference.mla_decode(q_latent.float(), q_rope.float(), cache.float(), positions, MLA_SCALE)
    nan_safe = not bool(got[0].isnan().any() or got[1].isnan().any())
    return attention_check("mla_decode", case, dtype, got, want, nan_safe)


def check_sparse_mla(kernels, case: str, lengths: list[int], n_query: int, n_keys: int, dtype: torch.dtype) -> Check:
    """Kernel on a cache NaN-poisoned in every unselected slot vs the float32 reference on the clean cache."""
    q_latent, q_rope, cache = latent_inputs(len(lengths), n_query, n_keys, dtype)
    indices = causal_topk(kernels, last_positions(lengths, n_query), n_keys)
    selected = torch.zeros(len(lengths), n_keys + 1, dtype=torch.bool, device=DEVICE)
    flat = torch.where(indices >= 0, indices, n_keys).long().flatten(1)
    selected.scatter_(1, flat, True)
    dirty = cache.masked_fill(~selected[:, :n_keys, None], float("nan"))
    got = kernels.triton_sparse_mla.sparse_mla(q_latent, q_rope, dirty, indices, MLA_SCALE)
    want = kernels.reference.sparse_mla(q_latent.float(), q_rope.float(), cache.float(), indices, MLA_SCALE)
    nan_safe = not bool(got[0].isnan().any() or got[1].isnan().any())
    return attention_check("sparse_mla", case, dtype, got, want, nan_safe)


def check_indexer(kernels, case: str, lengths: list[int], n_query: int, n_keys: int, dtype: torch.dtype) -> Check:
    """Kernel on keys NaN-poisoned past each length vs the reference (float32 math) on the clean keys."""
    q, weights, keys = index_inputs(len(lengths), n_query, n_keys, dtype)
    positions = last_positions(lengths, n_query)
    got = kernels.triton_indexer.indexer_logits(q, weights, poison_after(keys, lengths), positions, INDEX_SCALE)
    want = kernels.reference.indexer_logits(q, weights, keys, positions, INDEX_SCALE)
    rel, inf_equal, nan_safe = relative_error(got, want), same_inf(got, want), not bool(got.isnan().any())
    ok = rel <= INDEX_TOLERANCE[dtype] and inf_equal and nan_safe
    return Check("indexer_logits", case, dtype_name(dtype), rel, 0.0, inf_equal, nan_safe, ok)


def gpu_microseconds(fn: Callable[[], object]) -> float:
    """Median time of `fn` in microseconds; do_bench zeroes a 256 MB buffer before each call (cold L2)."""
    from triton.testing import do_bench

    try:
        return 1e3 * do_bench(fn, warmup=25, rep=100, return_mode="median")
    except TypeError:  # a triton without return_mode
        return 1e3 * do_bench(fn, warmup=25, rep=100)


def copy_bandwidth() -> float:
    """Bytes per second (read + write) of a 1 GiB device-to-device copy: the achievable memory rate."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    seconds = gpu_microseconds(lambda: dst.copy_(src)) / 1e6
    return 2 * src.numel() / seconds


def time_mla_decode(kernels, batch: int, n_query: int, n_keys: int, dtype: torch.dtype) -> Timing:
    q_latent, q_rope, cache = latent_inputs(batch, n_query, n_keys, dtype)
    positions = last_positions([n_keys] * batch, n_query)
    args = (q_latent, q_rope, cache, positions, MLA_SCALE)
    size = dtype.itemsize
    moved = cache.numel() * size + 2 * q_latent.numel() * size + q_rope.numel() * size
    flops = 2 * batch * n_query * HEADS * n_keys * (2 * D_C + D_R)
    return Timing(
        "mla_decode", f"B={batch} T={n_query} L={n_keys}", dtype_name(dtype),
        gpu_microseconds(lambda: kernels.triton_mla_decode.mla_decode(*args)),
        gpu_microseconds(lambda: kernels.reference.mla_decode(*args)), moved, flops,
    )


def time_sparse_mla(kernels, batch: int, n_query: int, n_keys: int, dtype: torch.dtype) -> Timing:
    q_latent, q_rope, cache = latent_inputs(batch, n_query, n_keys, dtype)
    indices = causal_topk(kernels, last_positions([n_keys] * batch, n_query), n_keys)
    args = (q_latent, q_rope, cache, indices, MLA_SCALE)
    size = dtype.itemsize
    selected = int((indices >= 0).sum())
    moved = selected * (D_C + D_R) * size + indices.numel() * 4 + 2 * q_latent.numel() * size + q_rope.numel() * size
    flops = 2 * HEADS * selected * (2 * D_C + D_R)
    return Timing(
        "sparse_mla", f"B={batch} T={n_query} L={n_keys} K={TOPK}", dtype_name(dtype),
        gpu_microseconds(lambda: kernels.triton_sparse_mla.sparse_mla(*args)),
        gpu_microseconds(lambda: kernels.reference.sparse_mla(*args)), moved, flops,
    )


def time_indexer(kernels, batch: int, n_query: int, n_keys: int, dtype: torch.dtype) -> Timing:
    q, weights, keys = index_inputs(batch, n_query, n_keys, dtype)
    positions = last_positions([n_keys] * batch, n_query)
    args = (q, weights, keys, positions, INDEX_SCALE)
    visible = int((positions + 1).clamp(min=0).sum())
    moved = keys.numel() * dtype.itemsize + batch * n_query * n_keys * 4 + q.numel() * dtype.itemsize
    return Timing(
        "indexer_logits", f"B={batch} T={n_query} L={n_keys}", dtype_name(dtype),
        gpu_microseconds(lambda: kernels.triton_indexer.indexer_logits(*args)),
        gpu_microseconds(lambda: kernels.reference.indexer_logits(*args)), moved,
        2 * INDEX_HEADS * INDEX_DIM * visible,
    )


def plan(quick: bool) -> tuple[list[tuple], list[tuple]]:
    """Checks `(fn, case, lengths, T, L)` (each run in float32 and bfloat16) and timings `(fn, B, T, L, dtype)`."""
    long = 4096 if quick else 32768
    checks = [
        (check_mla_decode, "ragged decode", [1, 777, long // 2 + 1, long], 1, long),
        (check_mla_decode, "speculative T=3", [long, long // 2 + 1], 3, long),
        (check_mla_decode, "padding query T=2", [1, 300], 2, 300),
        (check_sparse_mla, "ragged decode", [1000, TOPK, long // 2 + 1, long], 1, long),
        (check_sparse_mla, "prefill crossing top-k", [2155], 256, 4096),
        (check_indexer, "ragged decode", [1, 777, long // 2 + 1, long], 1, long),
        (check_indexer, "prefill", [4096], 256, 4096),
    ]
    batches = [1, 8] if quick else [1, 8, 32]
    bf16, fp32 = torch.bfloat16, torch.float32
    timings = [(time_mla_decode, b, 1, n, bf16) for b in batches for n in sorted({4096, long})]
    timings += [(time_mla_decode, 8, 2, long, bf16), (time_mla_decode, 8, 1, long, fp32)]
    timings += [(time_sparse_mla, b, 1, long, bf16) for b in batches]
    timings += [(time_sparse_mla, 1, 512 if not quick else 128, 8192, bf16), (time_sparse_mla, 8, 1, long, fp32)]
    timings += [(time_indexer, b, 1, long, bf16) for b in batches]
    timings += [(time_indexer, 1, 512 if not quick else 128, 8192, bf16), (time_indexer, 8, 1, long, fp32)]
    return checks, timings


def run_checks(kernels, checks: list[tuple]) -> list[Check]:
    results = []
    for fn, case, lengths, n_query, n_keys in checks:
        for dtype in (torch.float32, torch.bfloat16):
            torch.manual_seed(0)
            try:
                results.append(fn(kernels, case, lengths, n_query, n_keys, dtype))
            except Exception:  # one broken case must not hide the others' results
                op, nan, error = fn.__name__.removeprefix("check_"), float("nan"), traceback.format_exc()
                results.append(Check(op, case, dtype_name(dtype), nan, nan, False, False, False, error))
            print(f"check {results[-1].op} {case} {dtype}: {'ok' if results[-1].ok else 'FAILED'}", flush=True)
            torch.cuda.empty_cache()
    return results


def run_timings(kernels, timings: list[tuple]) -> tuple[list[Timing], list[str]]:
    results, errors = [], []
    for fn, batch, n_query, n_keys, dtype in timings:
        torch.manual_seed(0)
        try:
            results.append(fn(kernels, batch, n_query, n_keys, dtype))
            print(f"timed {results[-1].op} {results[-1].shape} {results[-1].dtype}", flush=True)
        except Exception:
            errors.append(f"{fn.__name__} B={batch} T={n_query} L={n_keys} {dtype}:\n{traceback.format_exc()}")
            print(errors[-1], flush=True)
        torch.cuda.empty_cache()
    return results, errors


def render(checks: list[Check], timings: list[Timing], bandwidth: float) -> str:
    lines = ["| op | case | dtype | out rel err | lse rel err | -inf pattern | NaN-safe | ok |", "|---" * 8 + "|"]
    for c in checks:
        lines.append(
            f"| {c.op} | {c.case} | {c.dtype} | {c.out_rel:.2e} | {c.lse_rel:.2e} | {c.inf_pattern_equal} | "
            f"{c.nan_safe} | {'ok' if c.ok else '**FAILED**'} |"
        )
    lines += [
        "",
        f"Measured device copy: {bandwidth / 1e9:.0f} GB/s (read + write); "
        f"datasheet peak {PEAK_BYTES_PER_S / 1e9:.0f} GB/s.",
        "",
        "| op | shape | dtype | triton µs | torch µs | speedup | GB/s | % of 4.8 TB/s | % of copy | TFLOP/s |",
        "|---" * 10 + "|",
    ]
    for t in timings:
        lines.append(
            f"| {t.op} | {t.shape} | {t.dtype} | {t.triton_us:.1f} | {t.torch_us:.1f} | {t.speedup:.1f}x | "
            f"{t.gb_per_s:.0f} | {100 * t.gb_per_s * 1e9 / PEAK_BYTES_PER_S:.0f}% | "
            f"{100 * t.gb_per_s * 1e9 / bandwidth:.0f}% | {t.tflop_per_s:.1f} |"
        )
    return "\n".join(lines)


def write_json(checks: list[Check], timings: list[Timing], errors: list[str], bandwidth: float) -> None:
    folder = os.environ.get("OUT")
    if not folder:
        return
    import triton

    report = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "copy_bandwidth_bytes_per_s": bandwidth,
        "peak_bytes_per_s": PEAK_BYTES_PER_S,
        "checks": [asdict(c) for c in checks],
        "timings": [{**asdict(t), "speedup": t.speedup, "gb_per_s": t.gb_per_s, "tflop_per_s": t.tflop_per_s}
                    for t in timings],
        "timing_errors": errors,
    }
    path = Path(folder) / "kernels_gpu.json"
    path.write_text(json.dumps(report, indent=2))
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="contexts up to 4k and fewer shapes")
    args = parser.parse_args()
    require_gpu()
    kernels = load_kernels()
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 references in true float32
    torch.backends.cudnn.allow_tf32 = False
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    checks, timings = plan(args.quick)
    check_results = run_checks(kernels, checks)
    bandwidth = copy_bandwidth()
    timing_results, errors = run_timings(kernels, timings)
    print(render(check_results, timing_results, bandwidth))
    for check in check_results:
        if check.error:
            print(f"\n{check.op} {check.case} {check.dtype}:\n{check.error}")
    write_json(check_results, timing_results, errors, bandwidth)
    failed = [c for c in check_results if not c.ok]
    if failed or errors:
        sys.exit(f"{len(failed)} check(s) failed, {len(errors)} timing(s) raised")


if __name__ == "__main__":
    main()
