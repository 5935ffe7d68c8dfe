"""Which implementation of an attention op runs: the torch reference or a Triton kernel.

The choice is made per call, from (in order) the innermost `use_backend(...)` block, the
`JEV_KERNELS` environment variable (`torch`, `triton` or `auto`, read at call time so tests can
flip it), and otherwise `auto`: Triton for bfloat16/float16 CUDA tensors when triton is installed,
torch elsewhere. On an H200 the float32 kernels ran at 0.1-0.4x of the torch reference, the half
precision ones at 0.5-9x (docs/benchmarks.md, "Triton kernels on a GPU"), so float32 stays on torch.

Forcing `triton` on CPU tensors runs Triton's interpreter, which only works when
`TRITON_INTERPRET=1` was set before the kernels were defined (triton decides at decoration time),
so that case is checked here and reported clearly instead of failing deep inside a launch.
This module never imports triton itself: `jev.kernels.ops` must import on machines without it.
"""

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import ModuleType

import torch

BACKEND_ENV = "JEV_KERNELS"
INTERPRET_ENV = "TRITON_INTERPRET"
BACKENDS = ("auto", "torch", "triton")
# Dtypes `auto` sends to Triton on CUDA: the kernels' tensor-core path.
AUTO_TRITON_DTYPES = (torch.bfloat16, torch.float16)
# The module every Triton kernel module imports just before defining its kernels.
_LAUNCH_MODULE = "jev.kernels.triton_launch"

_override: ContextVar[str | None] = ContextVar("jev_kernels_backend", default=None)


class KernelBackendError(RuntimeError):
    """The requested kernel backend cannot run here (triton missing, or CPU without the interpreter)."""


def interpreter_requested() -> bool:
    """Whether `TRITON_INTERPRET` is set to a true value now (triton's own spelling of true)."""
    return os.environ.get(INTERPRET_ENV, "").strip().lower() in {"1", "true", "yes", "on", "y"}


def triton_installed() -> bool:
    """Whether triton can be found, without importing it (a `None` entry in `sys.modules` counts as absent)."""
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


def requested() -> str:
    """The backend asked for: a `use_backend` block wins over `JEV_KERNELS`; `auto` when neither is set."""
    choice = _override.get() or os.environ.get(BACKEND_ENV, "").strip().lower() or "auto"
    if choice not in BACKENDS:
        raise KernelBackendError(f"{BACKEND_ENV}={choice!r}: expected one of {', '.join(BACKENDS)}")
    return choice


@contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Run the ops in this block with backend `name` (`torch`, `triton` or `auto`), whatever the env says."""
    if name not in BACKENDS:
        raise KernelBackendError(f"unknown kernel backend {name!r}: expected one of {', '.join(BACKENDS)}")
    token = _override.set(name)
    try:
        yield
    finally:
        _override.reset(token)


def _interpreted_kernels() -> bool:
    """Whether the Triton kernels are (or, once imported, will be) defined for the interpreter."""
    launch = sys.modules.get(_LAUNCH_MODULE)
    return launch.INTERPRETED if launch is not None else interpreter_requested()


def use_triton(tensor: torch.Tensor) -> bool:
    """Whether the op over `tensor` should run its Triton kernel; raises when `triton` is forced but cannot run."""
    choice = requested()
    if choice == "torch":
        return False
    if choice == "auto":
        return tensor.is_cuda and tensor.dtype in AUTO_TRITON_DTYPES and triton_installed()
    if not triton_installed():
        raise KernelBackendError(
            f"{BACKEND_ENV}=triton but triton is not installed; install it or set {BACKEND_ENV}=torch"
        )
    if not tensor.is_cuda and not _interpreted_kernels():
        raise KernelBackendError(
            f"{BACKEND_ENV}=triton with {tensor.device.type} tensors needs Triton's interpreter: set "
            f"{INTERPRET_ENV}=1 before jev.kernels' Triton modules are imported (it is read when kernels are defined)"
        )
    return True


def triton_module(name: str) -> ModuleType:
    """Import the Triton kernel module `jev.kernels.<name>` on first use (triton is imported only then)."""
    return importlib.import_module(f"jev.kernels.{name}")
