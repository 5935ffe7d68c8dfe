"""What the model's large matrix products read their weights as, for inference on a CPU.

Why: on a CPU a decode step is bound by streaming every weight once, and a decision pass by the
matrix products themselves. Three stored forms halve float32's bytes per product:

- `fp16`: fbgemm's float16 linear, float16 weights computed in float32: a decode step streams half
  the bytes, and a probability moves by about 1e-5 on average.
- `bf16`: bfloat16 weights packed for oneDNN, and bfloat16 products on the activations rounded to
  bfloat16. A pass over fresh sequences runs each layer's attention and MLP in bfloat16 from the
  normed input to the branch's output (the residual stream stays float32); a pass that extends a
  cache returns each product to float32. Where the CPU multiplies bfloat16 in hardware (AVX-512
  BF16, AMX) a decision pass is two to three times as fast as fp16's, but plain decoding runs at about
  0.85x fp16's speed and a probability moves about ten times as far (`docs/benchmarks.md`);
  elsewhere bfloat16 is emulated and slow, and on a CPU without AVX-512 (or AVX-NE-CONVERT) oneDNN
  packs no bfloat16 weight, so bf16 and mixed are refused there (`bfloat16_packing`).
- `mixed`: both, so each pass takes the form that is fast for it: passes over fresh sequences
  (decisions, prompts) multiply in bfloat16; passes that extend the caches of fewer than
  BATCHED_EXTENDING sequences (decoding, verifying drafts) in fp16. A weight that lies on a 4-bit
  grid per 32 inputs, as the base's Q4_1 blocks do (every MLP of the shipped model: conversion and
  fine-tuning leave them alone), extends a cache through torch's int4 weight-only kernel instead, on
  those same 4-bit codes: a quarter of fp16's bytes, with the activations, scales and offsets
  rounded to bfloat16. fp16 and int4 cost a row each: over the shipped model's products, 14 ms
  for 1 row, 45 for 16, 236 for 128, where bfloat16 on AMX costs 25 to 43 ms up to 64 rows
  (`benchmarks/step_products.py`, 2 threads). So a pass extending the caches of BATCHED_EXTENDING
  or more sequences multiplies in bfloat16 too, in blocks of exactly `extending_block(sequences)`
  rows.

int4 keeps each row's result a function of its own input row only, and so does fp16 where fbgemm
runs its AVX-512 kernels; on an AVX2-only CPU fbgemm multiplies a batch's last one or two rows by
other kernels, which round otherwise (within float32's error, `tests/test_weights.py`), so there a
plain step (one row) and a verify pass (several) can score a position a rounding apart, and greedy
text with drafts may part from plain decoding's at a near-tie. bf16 does too within one
block size, but oneDNN picks its kernel by the row count, and a row multiplied in blocks of another
size can come out one bfloat16 step apart (in a one-off probe, 44 of 1,899 matrix and row-count
pairs of the shipped model, against none by position within a block): a decision's probabilities can move at that level
with what else is in its batch. `mixed` picks the form by the kind of pass and the number of
sequences, never by the number of tokens, and a batched extension's block is fixed by the number of
sequences alone, so a generation's plain steps and verify passes multiply every row alike (the
speculative path stays lossless, as on fp16; on bf16 a verified block and a plain step may part at
such a near-tie). The products are not all of a pass, though: greedily, on the shipped model, a
verify pass of four tokens and a plain step once broke a tie between two tokens differently
(`docs/benchmarks.md`, against llama.cpp).
`auto` takes `mixed` where fbgemm and oneDNN run and the CPU has native bfloat16, fp16 where only
fbgemm runs (x86), else float32. What each moves is measured on test decisions (`benchmarks/weights.py`).

int8 was tried and left out: fbgemm quantises the activations with one range per call, so the bos
token's outlier states set every row's precision, and even with each row scaled to its own range
the next-token distribution moved far from float32's (`docs/benchmarks.md`).

Stored this way: the q, kv-down and output projections of every attention layer, the MLPs and the
LM head. Kept in float32: `kv_b_proj` (the absorbed decode form reads its weight, not its product;
a fresh bfloat16 pass rounds it as it goes), the indexer (its scores pick the top-k keys), the norms'
weights and statistics, the embeddings, the residual stream and the decision heads. Such a model is
for inference only: it has no gradients and is never saved.
"""

from collections.abc import Callable
from functools import cache, partial
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from jev.model.mla import AttentionBatch
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
# to the step of the first bound in ROW_STEPS that holds them: a few dozen shapes per weight, whatever
# the traffic. The blocks are large because oneDNN on AMX multiplies a large block much faster per
# row than a small one, and because the blocks' products are concatenated: a batch of 32 decisions
# of up to 256 tokens is one block.
ROW_BLOCK = 8192
ROW_STEPS = ((16, 1), (256, 16), (1024, 64), (ROW_BLOCK, 256))


def padded_rows(rows: int) -> int:
    """The row count a last block of `rows` rows is multiplied as."""
    step = next(step for bound, step in ROW_STEPS if rows <= bound)
    return -(-rows // step) * step


@cache
def bfloat16_packing() -> bool:
    """Whether oneDNN packs bfloat16 weights on this CPU: it needs AVX-512 (BW, VL and DQ) or
    AVX-NE-CONVERT, and refuses an AVX2-only CPU, where bf16 and mixed weights are unavailable."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        packed_bfloat16(torch.zeros(16, 16))
    except RuntimeError:
        return False
    return True


def packed_bfloat16(weight: torch.Tensor) -> torch.Tensor:
    """W `[N, K]` as bfloat16 in oneDNN's blocked layout for `x W^T` (an opaque MKLDNN tensor)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().to(torch.bfloat16), PACKED_FOR_ROWS)


def packed_product(rows: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    """`rows [M, K]` (bfloat16) times a `packed_bfloat16` weight: `[M, N]` bfloat16."""
    return torch.ops.mkldnn._linear_pointwise(rows, packed, None, "none", [], "")


# The row count oneDNN lays a packed weight out for: a decision of about a hundred tokens. Any count
# multiplies by it, to the same numbers as `torch.mm`.
PACKED_FOR_ROWS = 128


class Bf16Linear(nn.Module):
    """`x W^T` with W stored as bfloat16 and multiplied in bfloat16; the result returns in `x`'s dtype.

    W is packed once in oneDNN's own layout: `torch.mm` on a plain bfloat16 weight reorders it on every
    call, which costs a third of a 128-row product's time."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.packed = packed_bfloat16(linear.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._in_blocks(x, ROW_BLOCK, padded_rows)

    def in_blocks_of(self, x: torch.Tensor, block: int) -> torch.Tensor:
        """`x W^T` multiplied in blocks of exactly `block` rows (the last padded with zeros): one kernel
        for every call, so a row's result never depends on how many rows came with it."""
        return self._in_blocks(x, block, lambda rows: block)

    def _in_blocks(self, x: torch.Tensor, block: int, padded: Callable[[int], int]) -> torch.Tensor:
        """`x W^T` over blocks of `block` rows, each multiplied as `padded(its rows)` rows (zeros appended)."""
        rows = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
        blocks = [self._block(rows[start : start + block], padded) for start in range(0, len(rows), block)]
        out = blocks[0] if len(blocks) == 1 else torch.cat(blocks)
        return out.view(*x.shape[:-1], -1).to(x.dtype)

    def _block(self, block: torch.Tensor, padded: Callable[[int], int]) -> torch.Tensor:
        size, to = len(block), padded(len(block))
        return packed_product(F.pad(block, (0, 0, 0, to - size)) if to > size else block, self.packed)[:size]


# Q4_1's block: 32 inputs share a scale and an offset. torch's int4 kernel packs output rows in 16s.
INT4_GROUP = 32
INT4_ROWS = 16


def int4_grid(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """`(codes, scale, low)` when every weight is `low + code * scale` with `code` in 0..15 per group of
    INT4_GROUP inputs (`[N, K]` int32 codes, `[N, K / INT4_GROUP]` scales and lows), else None.

    Q4_1 stores a block's minimum as its offset and (max - min) / 15 as its scale, so a dequantized
    block's own minimum and maximum give both back, and the codes round exactly. The first rows are
    tried alone first, so a large weight off any grid (the LM head) is refused without a float64
    copy of it."""
    rows, inputs = weight.shape
    if inputs % INT4_GROUP or rows % INT4_ROWS:
        return None
    if rows > INT4_ROWS and _grid_of(weight[:INT4_ROWS]) is None:
        return None
    return _grid_of(weight)


def _grid_of(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    rows, inputs = weight.shape
    groups = weight.detach().double().view(rows, inputs // INT4_GROUP, INT4_GROUP)
    low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
    scale = (high - low) / 15
    codes = torch.where(scale > 0, (groups - low) / scale.clamp(min=1e-300), 0).round().clamp(0, 15)
    if not bool(((low + codes * scale - groups).abs() <= 1e-3 * scale).all()):
        return None
    return codes.view(rows, inputs).int(), scale.squeeze(-1).float(), low.squeeze(-1).float()


class Int4Linear(nn.Module):
    """`x W^T` for a W on a 4-bit grid (`int4_grid`'s codes, scales and lows), multiplied by torch's
    int4 weight-only kernel.

    The kernel reads a weight as `(code - 8) * scale + zero` per group, with bfloat16 activations,
    scales and zeros; the result returns in `x`'s dtype."""

    def __init__(self, grid: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
        super().__init__()
        codes, scale, low = grid
        self.register_buffer("packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1))
        zero = low + 8 * scale
        self.register_buffer("scale_and_zero", torch.stack((scale.T, zero.T), -1).contiguous().to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.packed, INT4_GROUP, self.scale_and_zero)
        return out.view(*x.shape[:-1], -1).to(x.dtype)


# Passes extending the caches of this many sequences or more multiply in bfloat16 (`mixed`), in fixed
# blocks of the first of EXTENDING_BLOCKS rows that holds them all (the last for more): the shipped
# model's products in blocks of 16 / 32 / 64 rows cost 29 / 35 / 43 ms for 16 / 32 / 64 rows, fp16
# and int4 28 ms at 8 rows and 45 at 16, but 14 at one row (`benchmarks/step_products.py`).
BATCHED_EXTENDING = 8
EXTENDING_BLOCKS = (16, 32, 64)


def extending_block(sequences: int) -> int | None:
    """The row block a `mixed` pass extending `sequences` caches multiplies in, in bfloat16; None for
    fp16 and int4."""
    if sequences < BATCHED_EXTENDING:
        return None
    return next((block for block in EXTENDING_BLOCKS if sequences <= block), EXTENDING_BLOCKS[-1])


class PassKind:
    """What the pass now running is, as the model's decoder layers report it: over fresh sequences,
    and otherwise the row block its bfloat16 products take (None: fp16 and int4).

    One per model: passes run one at a time (a decider's compute lock serialises them)."""

    def __init__(self) -> None:
        self.fresh = False
        self.block: int | None = None

    def observe(self, layer: DecoderLayer, args: tuple) -> None:
        """A forward pre-hook of each decoder layer: `args[1]` is the pass's `AttentionBatch`."""
        batch = args[1]
        self.fresh = batch.expanded
        self.block = None if batch.expanded or batch.cache is None else extending_block(batch.cache.batch_size)


class MixedLinear(nn.Module):
    """`x W^T` in bfloat16 within a pass over fresh sequences or one extending many caches (in fixed
    row blocks), otherwise through fbgemm's float16, or the int4 kernel for a weight on a 4-bit grid.

    The LM head runs after the last layer, so it takes the form of the pass it ends."""

    def __init__(self, linear: nn.Linear, kind: PassKind) -> None:
        super().__init__()
        self.fresh = Bf16Linear(linear)
        grid = int4_grid(linear.weight)
        self.extending = Fp16Linear(linear) if grid is None else Int4Linear(grid)
        self.kind = kind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind.fresh:
            return self.fresh(x)
        if self.kind.block is not None:
            return self.fresh.in_blocks_of(x, self.kind.block)
        return self.extending(x)


STORED = {"fp16": Fp16Linear, "bf16": Bf16Linear, "mixed": MixedLinear}


def stored_like(linear: nn.Linear, like: nn.Module) -> nn.Module:
    """`linear` (float32) in the stored form `like` has, `like` being one of a model's large linears:
    a drafter's rows of the target's LM head take that head's form, and, with mixed weights, follow
    the target's pass kind. A float32 `like` returns `linear` itself."""
    if isinstance(like, MixedLinear):
        return MixedLinear(linear, like.kind)
    form = next((form for form in (Fp16Linear, Bf16Linear) if isinstance(like, form)), None)
    return linear if form is None else form(linear)


def storable_weights() -> tuple[Weights, ...]:
    """The forms a float32 model on this CPU can be stored as, `auto` aside: fp16 needs fbgemm, bf16
    oneDNN's bfloat16 packing, mixed both."""
    fbgemm = _fbgemm()
    runs = {"float32": True, "fp16": fbgemm, "bf16": bfloat16_packing(), "mixed": fbgemm and bfloat16_packing()}
    return tuple(form for form, here in runs.items() if here)


def fp16_available(model: Model) -> bool:
    """Whether fp16 weights run here: a float32 model on the CPU, and a torch build with fbgemm (x86)."""
    return _cpu_float32(model) and _fbgemm()


def _fbgemm() -> bool:
    return "fbgemm" in torch.backends.quantized.supported_engines


def _cpu_float32(model: Model) -> bool:
    return model.device.type == "cpu" and model.dtype == torch.float32


def auto_weights(model: Model) -> Weights:
    """What `auto` stores for this model here: mixed where fbgemm and oneDNN run and the CPU has native
    bfloat16, fp16 where only fbgemm runs, else float32."""
    if model.weights != "float32" or not fp16_available(model):
        return "float32"
    return "mixed" if native_bfloat16() and bfloat16_packing() else "fp16"


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
    if weights in ("bf16", "mixed") and not torch.backends.mkldnn.is_available():
        raise WeightsError(f"{weights} weights need a torch build with oneDNN (mkldnn)")
    if weights in ("bf16", "mixed") and not bfloat16_packing():
        raise WeightsError(
            f"{weights} weights need a CPU that oneDNN packs bfloat16 weights for (AVX-512 BW, VL and DQ, "
            "or AVX-NE-CONVERT); this one has neither: use fp16 or auto"
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
    # No weight of such a model learns: with its embeddings and norms still asking for gradients, a
    # pass with autograd on recorded every op, and a bfloat16 prefill took 57 s instead of 0.16.
    model.requires_grad_(False)
    if weights in ("bf16", "mixed"):
        model.fresh_branch_dtype = torch.bfloat16
        model.replays_pass = _few_sequences if weights == "mixed" else _no_pass
    model.replay_cached_passes(model.step_graphs is not None)
    return targets


# Which cached passes a traced graph may replay (`jev.model.step_graphs`): those whose products take
# one form whatever their row count (fp16's and int4's do). bfloat16 products pad their rows to a
# count that depends on it.


def _few_sequences(batch: AttentionBatch) -> bool:
    """Mixed weights: fewer than BATCHED_EXTENDING sequences multiply in fp16 and int4, row by row."""
    return extending_block(batch.cache.batch_size) is None


def _no_pass(batch: AttentionBatch) -> bool:
    return False
