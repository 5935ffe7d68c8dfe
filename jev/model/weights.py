"""What the model's large matrix products read their weights as, for inference on a CPU.

Why: on a CPU a decode step is bound by streaming every weight once, and a decision pass by the
matrix products themselves. Two stored forms halve float32's bytes:

- `fp16`: fbgemm's float16 linear, float16 weights computed in float32: a decode step streams half
  the bytes, and a probability moves by about 1e-5 on average.
- `bf16`: bfloat16 weights, and bfloat16 products (oneDNN) on the activations rounded to bfloat16,
  returned as float32. Where the CPU multiplies bfloat16 in hardware (AVX-512 BF16, AMX) a decision
  pass took 0.83-0.90x fp16's time, but plain decoding ran at about half fp16's speed and a
  probability moved about ten times as far (`docs/benchmarks.md`); elsewhere bfloat16 is emulated
  and slow.

Both keep each result row a function of its own input row only, so a decision never depends on what
else is in its batch, and a verified block scores each position as plain decoding does (the
speculative path stays lossless). `auto` takes fp16 where fbgemm runs (x86), else float32: measured
on a CPU with native bfloat16, bf16 gave decisions little and cost decoding and precision more.
What each moves is measured on test decisions (`benchmarks/weights.py`).

int8 was tried and left out: fbgemm quantises the activations with one range per call, so the bos
token's outlier states set every row's precision, and even with each row scaled to its own range
the next-token distribution moved far from float32's (`docs/benchmarks.md`).

Stored this way: the q, kv-down and output projections of every attention layer, the MLPs and the
LM head. Kept in float32: `kv_b_proj` (the absorbed decode form reads its weight, not its product),
the indexer (its scores pick the top-k keys), the norms, the embeddings, the residual stream, the
attention itself and the decision heads. Such a model is for inference only: it has no gradients
and is never saved.
"""

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from jev.model.transformer import Model

Weights = Literal["auto", "float32", "fp16", "bf16"]
WEIGHTS: tuple[Weights, ...] = ("auto", "float32", "fp16", "bf16")
LARGE_LINEARS = frozenset(
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


class Bf16Linear(nn.Module):
    """`x W^T` with W stored as bfloat16 and multiplied in bfloat16; the result returns in `x`'s dtype."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.register_buffer("weight", linear.weight.detach().to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.to(torch.bfloat16), self.weight).to(x.dtype)


STORED = {"fp16": Fp16Linear, "bf16": Bf16Linear}


def fp16_available(model: Model) -> bool:
    """Whether fp16 weights run here: a float32 model on the CPU, and a torch build with fbgemm (x86)."""
    return _cpu_float32(model) and "fbgemm" in torch.backends.quantized.supported_engines


def _cpu_float32(model: Model) -> bool:
    return model.device.type == "cpu" and model.dtype == torch.float32


def auto_weights(model: Model) -> Weights:
    """What `auto` stores for this model here: fp16 where fbgemm runs, else float32 (see the module's
    docstring for why not bf16)."""
    return "fp16" if model.weights == "float32" and fp16_available(model) else "float32"


def large_linears(model: nn.Module) -> list[tuple[str, nn.Linear]]:
    """The `LARGE_LINEARS` of a float32 model, by name, in the order a forward pass multiplies by them."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in LARGE_LINEARS
    ]


def store_weights(model: Model, weights: Weights) -> list[str]:
    """Store the model's large `nn.Linear`s (`LARGE_LINEARS`) as `weights`, in place; returns the names
    changed (none for `float32`). The embedding stays float32, so a tied LM head gets its own copy."""
    if weights not in WEIGHTS:
        raise WeightsError(f"weights must be one of {', '.join(WEIGHTS)}, not {weights!r}")
    if weights == "auto":
        weights = auto_weights(model)
    if weights == "float32":
        return []
    if model.weights != "float32":
        raise WeightsError(f"the model's weights are {model.weights} already")
    if not _cpu_float32(model):
        raise WeightsError(
            f"{weights} weights need a float32 model on the CPU; this is {model.dtype} on {model.device}"
        )
    if weights == "fp16" and not fp16_available(model):
        raise WeightsError(
            "fp16 weights need a torch build with fbgemm; this one has "
            f"{', '.join(torch.backends.quantized.supported_engines)}"
        )
    targets = [name for name, _ in large_linears(model)]
    for name in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, STORED[weights](getattr(parent, child)))
    model.weights = weights
    return targets
