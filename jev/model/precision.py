"""Where bfloat16 arithmetic pays, and the autocast that uses it.

A CPU with AVX-512 BF16 or AMX multiplies bfloat16 matrices in hardware: there a training step
under bfloat16 autocast ran at about 0.4-0.6x float32's time. Elsewhere bfloat16 is emulated and
its matrix products were 5-8x slower than float32's (measured on an AVX2-only EPYC), so float32 stays.
"""

from contextlib import AbstractContextManager
from pathlib import Path

import torch

PRECISIONS = ("auto", "float32", "bfloat16")


def _cpu_flags() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices in hardware (AVX-512 BF16 or AMX)."""
    flags = _cpu_flags()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def amx_bfloat16() -> bool:
    """Whether this CPU has AMX tiles for bfloat16: torch's small fused kernels (SDPA's flash
    attention) multiply through oneDNN's brgemm only there, and fall back to slower products elsewhere."""
    return "amx_bf16" in _cpu_flags()


def resolve_autocast(precision: str, device: str = "cpu") -> bool:
    """`--precision` (`auto`, `float32`, `bfloat16`) as whether to run under bfloat16 autocast on
    `device`: `auto` is bfloat16 on a GPU, and on a CPU where `native_bfloat16` holds."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if precision == "auto":
        return device.startswith("cuda") or native_bfloat16()
    return precision == "bfloat16"


def bfloat16_autocast(enabled: bool, device_type: str = "cpu") -> AbstractContextManager:
    """bfloat16 autocast on `device_type` when `enabled`; a no-op otherwise."""
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=enabled)
