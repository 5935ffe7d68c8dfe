"""Smaller weights for the model's matrix products on CPU, through fbgemm: float16 or int8.

Why: on a CPU a decode step is bound by streaming every weight once, and a decision pass by float32
GEMM. Both modes keep every result row a function of its own input row alone, so a decision never
depends on what else is in its batch, and a verified block scores each position as plain decoding
does (the speculative path stays lossless):

- `fp16`: weights stored as float16 (half float32's bytes), activations and accumulation float32;
- `int8`: weights int8 with one scale per output row, and each activation row scaled to its own
  maximum before fbgemm quantises it. fbgemm picks one quantisation range per call from the whole
  input; a fixed anchor row `[1, -1, 0, ...]` pins that range to [-1, 1], so each row is quantised
  on its own scale (fbgemm's per-call range alone let the bos token's outliers set every row's
  precision: the next-token KL from float32 was 2.5 nats).

Quantised: the q, kv-down and output projections of every attention layer, the MLPs and the LM
head. Kept in float: `kv_b_proj` (the absorbed decode form reads its weight, not its product), the
indexer (its scores pick the top-k keys), the norms, the embeddings and the decision heads. A
quantised model is for inference only: it has no gradients and is never saved.
"""

import warnings
from typing import Literal

import torch
from torch import nn
from torch.ao.nn.quantized import dynamic
from torch.ao.quantization import per_channel_dynamic_qconfig

from jev.model.transformer import Model

Weights = Literal["float32", "fp16", "int8"]
WEIGHTS: tuple[Weights, ...] = ("float32", "fp16", "int8")
QUANTIZED_LINEARS = frozenset(
    {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"}
)


class QuantizeError(RuntimeError):
    """The model cannot take these weights here: it is not float32 on the CPU, or is quantised already."""


class Fp16Linear(nn.Module):
    """`x W^T` with W stored as float16 (fbgemm), computed in float32."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = torch.ops.quantized.linear_prepack_fp16(linear.weight.detach().float(), None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic_fp16(x, self.packed)


class Int8Linear(nn.Module):
    """`x W^T` with W int8 per output row and each row of x int8 on its own scale (fbgemm)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        linear.qconfig = per_channel_dynamic_qconfig
        with warnings.catch_warnings():
            # torch warns that its quantised tensor types will go; fbgemm's dynamic linear is still
            # the one int8 GEMM this build runs fast on CPU (`torch._int_mm` is ~100x slower here).
            warnings.simplefilter("ignore", UserWarning)
            self.inner = dynamic.Linear.from_float(linear)
        anchor = torch.zeros(1, linear.in_features)
        anchor[0, :2] = torch.tensor([1.0, -1.0])
        self.register_buffer("anchor", anchor, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        scale = rows.abs().amax(-1, keepdim=True).clamp(min=torch.finfo(x.dtype).tiny)
        out = self.inner(torch.cat((rows / scale, self.anchor)))[:-1] * scale
        return out.view(*x.shape[:-1], self.out_features)


def quantize(model: Model, weights: Weights) -> list[str]:
    """Replace the model's large `nn.Linear`s (`QUANTIZED_LINEARS`) in place; returns the names
    replaced (none for `float32`). The embedding stays float32, so a tied LM head gets its own copy."""
    if weights not in WEIGHTS:
        raise QuantizeError(f"weights must be one of {', '.join(WEIGHTS)}, not {weights!r}")
    if weights == "float32":
        return []
    if model.weights != "float32":
        raise QuantizeError(f"the model's weights are {model.weights} already")
    if model.device.type != "cpu" or model.dtype != torch.float32:
        raise QuantizeError(f"{weights} weights need a float32 model on the CPU, not {model.dtype} on {model.device}")
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        raise QuantizeError(f"this torch build has no fbgemm, which {weights} weights run on")
    torch.backends.quantized.engine = "fbgemm"
    kind = Fp16Linear if weights == "fp16" else Int8Linear
    targets = [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in QUANTIZED_LINEARS
    ]
    for name in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, kind(getattr(parent, child)))
    model.weights = weights
    return targets
