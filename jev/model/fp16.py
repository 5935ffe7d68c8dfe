"""Float16 weights for the model's matrix products on CPU, through fbgemm.

Why: on a CPU a decode step is bound by streaming every weight once. fbgemm's fp16 linear stores
each weight matrix as float16 (half float32's bytes) and computes in float32: on 2,000 test
decisions a calibrated probability moved by 1e-5 on average, at most 0.006, and no answer changed
(`benchmarks/fp16.py`). Each result row is a function of its own input row, so a decision never
depends on what else is in its batch, and a verified block scores each position as plain decoding
does (the speculative path stays lossless).

int8 was tried and left out: fbgemm quantises the activations with one range per call, so the bos
token's outlier states set every row's precision, and even with each row scaled to its own range
the next-token distribution moved far from float32's (`docs/benchmarks.md`).

Stored as float16: the q, kv-down and output projections of every attention layer, the MLPs and
the LM head. Kept in float32: `kv_b_proj` (the absorbed decode form reads its weight, not its
product), the indexer (its scores pick the top-k keys), the norms, the embeddings and the decision
heads. Such a model is for inference only: it has no gradients and is never saved.
"""

from typing import Literal

import torch
from torch import nn

from jev.model.transformer import Model

Weights = Literal["auto", "float32", "fp16"]
WEIGHTS: tuple[Weights, ...] = ("auto", "float32", "fp16")
FP16_LINEARS = frozenset(
    {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"}
)


class WeightsError(RuntimeError):
    """The model cannot take these weights here: it is not float32 on the CPU, or has them already."""


class Fp16Linear(nn.Module):
    """`x W^T` with W stored as float16 (fbgemm), computed in float32."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.packed = torch.ops.quantized.linear_prepack_fp16(linear.weight.detach().float(), None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic_fp16(x, self.packed)


def fp16_available(model: Model) -> bool:
    """Whether fp16 weights run here: a float32 model on the CPU, and a torch build with fbgemm (x86)."""
    cpu_float32 = model.device.type == "cpu" and model.dtype == torch.float32
    return cpu_float32 and "fbgemm" in torch.backends.quantized.supported_engines


def large_linears(model: nn.Module) -> list[tuple[str, nn.Linear]]:
    """The `FP16_LINEARS` of a float32 model, by name, in the order a forward pass multiplies by them."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in FP16_LINEARS
    ]


def store_weights(model: Model, weights: Weights) -> list[str]:
    """Store the model's large `nn.Linear`s (`FP16_LINEARS`) as `weights`, in place; returns the names
    changed (none for `float32`). `auto` is fp16 where `fp16_available`, else float32: a decision
    costs the same either way and a decode step is faster (`docs/benchmarks.md`). The embedding
    stays float32, so a tied LM head gets its own copy."""
    if weights not in WEIGHTS:
        raise WeightsError(f"weights must be one of {', '.join(WEIGHTS)}, not {weights!r}")
    if weights == "auto":
        weights = "fp16" if model.weights == "float32" and fp16_available(model) else "float32"
    if weights == "float32":
        return []
    if model.weights != "float32":
        raise WeightsError(f"the model's weights are {model.weights} already")
    if not fp16_available(model):
        raise WeightsError(
            f"fp16 weights need a float32 model on the CPU and a torch build with fbgemm; this is {model.dtype} "
            f"on {model.device}, with {', '.join(torch.backends.quantized.supported_engines)}"
        )
    targets = [name for name, _ in large_linears(model)]
    for name in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, Fp16Linear(getattr(parent, child)))
    model.weights = weights
    return targets
