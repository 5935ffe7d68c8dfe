"""What the model's large matrix products read their weights as, for inference on a CPU.

Why: on a CPU a decode step is bound by streaming every weight once, and a decision pass by the
matrix products themselves. Three stored forms halve float32's bytes per product:

- `fp16`: fbgemm's float16 linear, float16 weights computed in float32: a decode step streams half
  the bytes, and a probability moves by about 1e-5 on average.
- `bf16`: bfloat16 weights, and bfloat16 products (oneDNN) on the activations rounded to bfloat16,
  returned as float32. Where the CPU multiplies bfloat16 in hardware (AVX-512 BF16, AMX) a decision
  pass is faster than fp16's, but plain decoding runs at about half fp16's speed and a probability
  moves about ten times as far (`docs/benchmarks.md`); elsewhere bfloat16 is emulated and slow.
- `mixed`: both, so each pass takes the form that is fast for it: passes over fresh sequences
  (decisions, prompts) multiply in bfloat16, passes that extend a cache (decoding, verifying drafts)
  in fp16. The weights take float32's bytes in all.

Each form keeps each row's result a function of its own input row only, so a decision never depends
on what else is in its batch; `mixed` picks the form by the kind of pass, never by its shape, so a
verified block scores each position as plain decoding does (the speculative path stays lossless).
`auto` takes `mixed` where fbgemm runs and the CPU has native bfloat16, fp16 where only fbgemm
runs (x86), else float32. What each moves is measured on test decisions (`benchmarks/weights.py`).

int8 was tried and left out: fbgemm quantises the activations with one range per call, so the bos
token's outlier states set every row's precision, and even with each row scaled to its own range
the next-token distribution moved far from float32's (`docs/benchmarks.md`).

Stored this way: the q, kv-down and output projections of every attention layer, the MLPs and the
LM head. Kept in float32: `kv_b_proj` (the absorbed decode form reads its weight, not its product),
the indexer (its scores pick the top-k keys), the norms, the embeddings, the residual stream, the
attention itself and the decision heads. Such a model is for inference only: it has no gradients
and is never saved.
"""

from functools import partial
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from jev.model.precision import native_bfloat16
from jev.model.transformer import DecoderLayer, Model

Weights = Literal["auto", "float32", "fp16", "bf16", "mixed"]
WEIGHTS: tuple[Weights, ...] = ("auto", "float32", "fp16", "bf16", "mixed")
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


# oneDNN builds, and torch and oneDNN each cache, a kernel per shape of a bfloat16 product: a service
# whose batches come in every row count would grow by megabytes per new count (tens of MB in the serve
# soak test). So rows are multiplied in blocks of ROW_BLOCK, and the last block's rows are rounded up
# to a multiple of ROW_STEP (above ROW_STEP): a few dozen shapes per weight, whatever the traffic.
ROW_BLOCK = 256
ROW_STEP = 16


class Bf16Linear(nn.Module):
    """`x W^T` with W stored as bfloat16 and multiplied in bfloat16; the result returns in `x`'s dtype."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.register_buffer("weight", linear.weight.detach().to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
        n = len(rows)
        full = n - n % ROW_BLOCK
        parts = [F.linear(rows[start : start + ROW_BLOCK], self.weight) for start in range(0, full, ROW_BLOCK)]
        if full < n:
            rest = n - full
            padded = rest if rest <= ROW_STEP else -(-rest // ROW_STEP) * ROW_STEP
            parts.append(F.linear(F.pad(rows[full:], (0, 0, 0, padded - rest)), self.weight)[:rest])
        out = parts[0] if len(parts) == 1 else torch.cat(parts)
        return out.view(*x.shape[:-1], -1).to(x.dtype)


class PassKind:
    """Whether the pass now running is over fresh sequences, as the model's decoder layers report it.

    One flag per model: passes run one at a time (a decider's compute lock serialises them)."""

    def __init__(self) -> None:
        self.fresh = False

    def observe(self, layer: DecoderLayer, args: tuple) -> None:
        """A forward pre-hook of each decoder layer: `args[1]` is the pass's `AttentionBatch`."""
        self.fresh = args[1].expanded


class MixedLinear(nn.Module):
    """`x W^T` in bfloat16 within a pass over fresh sequences, through fbgemm's float16 otherwise.

    The LM head runs after the last layer, so it takes the form of the pass it ends."""

    def __init__(self, linear: nn.Linear, kind: PassKind) -> None:
        super().__init__()
        self.fresh = Bf16Linear(linear)
        self.extending = Fp16Linear(linear)
        self.kind = kind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fresh(x) if self.kind.fresh else self.extending(x)


STORED = {"fp16": Fp16Linear, "bf16": Bf16Linear, "mixed": MixedLinear}


def fp16_available(model: Model) -> bool:
    """Whether fp16 weights run here: a float32 model on the CPU, and a torch build with fbgemm (x86)."""
    return _cpu_float32(model) and "fbgemm" in torch.backends.quantized.supported_engines


def _cpu_float32(model: Model) -> bool:
    return model.device.type == "cpu" and model.dtype == torch.float32


def auto_weights(model: Model) -> Weights:
    """What `auto` stores for this model here: mixed where fbgemm runs and the CPU has native bfloat16,
    fp16 where only fbgemm runs, else float32."""
    if model.weights != "float32" or not fp16_available(model):
        return "float32"
    return "mixed" if native_bfloat16() else "fp16"


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
    if weights in ("fp16", "mixed") and not fp16_available(model):
        raise WeightsError(
            f"{weights} weights need a torch build with fbgemm; this one has "
            f"{', '.join(torch.backends.quantized.supported_engines)}"
        )
    targets = [name for name, _ in large_linears(model)]
    if weights == "mixed":
        kind = PassKind()
        for layer in model.backbone.layers:
            layer.register_forward_pre_hook(kind.observe)
        stored = partial(MixedLinear, kind=kind)
    else:
        stored = STORED[weights]
    for name in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, stored(getattr(parent, child)))
    model.weights = weights
    return targets
