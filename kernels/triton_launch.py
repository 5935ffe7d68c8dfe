"""Launch settings shared by the Triton kernels: interpreter mode, tile sizes, dot precision, split count.

Every Triton kernel module imports this module before defining its kernels, so `INTERPRETED`
records the mode those kernels were defined in (triton reads `TRITON_INTERPRET` at decoration).
"""

import torch
import triton
from jev.kernels.backend import interpreter_requested

INTERPRETED: bool = interpreter_requested()

# `tl.dot` needs every block dimension >= 16 on GPUs; query-row tiles and padded head/feature
# dims are rounded up to at least this.
MIN_DOT = 16
# Query rows (heads, or tokens x heads) per program: 16 keeps the [rows, kv_lora_rank=512] fp32
# accumulator in registers with 4 warps.
BLOCK_M = 16
# A split-KV partition never covers fewer keys than this, so partial results stay small next to
# the cache they summarise.
MIN_SPLIT_KEYS = 128
MAX_SPLITS = 64


def padded(n: int) -> int:
    """The power-of-two block size (>= 16) that covers a feature dimension of size `n`."""
    return max(MIN_DOT, triton.next_power_of_2(n))


def dot_precision(dtype: torch.dtype) -> str:
    """`ieee` for float32 inputs (TF32 would cost ~1e-3 relative accuracy), the default otherwise."""
    return "ieee" if dtype == torch.float32 else "tf32"


def pipeline(dtype: torch.dtype) -> dict[str, int]:
    """`num_warps`/`num_stages` launch options for the attention and indexer kernels.

    8 warps spread the `[16, 512]` float32 accumulator thinly enough that ptxas (sm_90) spills no
    registers (4 warps needed 255 and spilled); float32 tiles are twice as large, so one stage fewer.
    """
    return {"num_warps": 8, "num_stages": 1 if dtype == torch.float32 else 2}


def split_count(n_keys: int, n_programs: int, device: torch.device, forced: int | None = None) -> int:
    """How many split-KV partitions of `n_keys` keys: enough programs to fill the GPU twice.

    `n_programs` is the number of programs one partition launches. `forced` (tests, tuning)
    overrides the heuristic but is still capped at one partition per key.
    """
    if forced is not None:
        return max(1, min(forced, n_keys))
    target = 2 * torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1
    wanted = triton.cdiv(target, max(1, n_programs))
    return max(1, min(wanted, triton.cdiv(n_keys, MIN_SPLIT_KEYS), MAX_SPLITS))


def split_length(n_keys: int, n_splits: int, block_n: int) -> int:
    """Keys per partition, a multiple of `block_n` so only the last tile of a partition is ragged."""
    return triton.cdiv(triton.cdiv(max(n_keys, 1), n_splits), block_n) * block_n
