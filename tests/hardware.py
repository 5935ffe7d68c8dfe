"""What this CPU can run, for tests whose subject some CPUs lack.

oneDNN packs bfloat16 weights only on a CPU with AVX-512 (BW, VL and DQ) or AVX-NE-CONVERT, so tests
of bf16 and mixed weights are skipped on an AVX2-only CPU, where `store_weights` refuses them (the
refusal is tested on every CPU, `tests/test_weights.py::test_refusals`). fbgemm's float16 products
are row-independent bit for bit only through its AVX-512 kernels: on AVX2 a batch's last one or two
rows take other kernels and round differently."""

from pathlib import Path

import pytest

from jev.model.precision import native_bfloat16
from jev.model.weights import bfloat16_packing

BFLOAT16_PACKING = bfloat16_packing()
needs_bfloat16_packing = pytest.mark.skipif(
    not BFLOAT16_PACKING, reason="oneDNN packs no bfloat16 weights on this CPU (AVX-512 or AVX-NE-CONVERT needed)"
)
# What `--weights auto` stores here (this x86 torch has fbgemm).
AUTO = "mixed" if native_bfloat16() and BFLOAT16_PACKING else "fp16"
# The CPU's flags as Linux lists them, read here rather than through Jev's own code under test.
CPU_FLAGS = set(Path("/proc/cpuinfo").read_text().split()) if Path("/proc/cpuinfo").is_file() else set()
FBGEMM_AVX512 = {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= CPU_FLAGS


def weights_cases(cases: list) -> list:
    """`cases` for `pytest.mark.parametrize`, those whose (first) value names bf16 or mixed weights
    marked `needs_bfloat16_packing`."""

    def bfloat16(case: object) -> bool:
        first = case[0] if isinstance(case, tuple) else case
        return isinstance(first, str) and first.startswith(("bf16", "mixed"))

    return [
        pytest.param(*(case if isinstance(case, tuple) else (case,)), marks=needs_bfloat16_packing)
        if bfloat16(case) else case
        for case in cases
    ]
