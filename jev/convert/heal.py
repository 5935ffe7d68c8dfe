"""Healing a converted model against its source, in three stages, each a plain loop that can resume.

1. `transfer` (layer-wise attention transfer, after LoLCATs): every MLA layer learns to reproduce the
   source layer's attention output from the source's own residual stream. The layers never see each
   other's errors, so one teacher pass trains all of them; the loss is each layer's squared error
   relative to its output's energy, so deep and shallow layers weigh the same.
2. `distill`: the whole model against the source's next-token distribution (KL), training attention
   only; embeddings, MLPs and norms stay as the source has them.
3. `indexer`: DeepSeek-V3.2's dense warm-up: each DSA indexer learns the head-summed attention
   distribution of its layer (KL), everything else frozen.
4. `sparse` (none by default): the distillation again, but with DSA selecting: attention learns to
   do with the keys the trained indexers keep, as DeepSeek-V3.2's sparse stage trains the model
   under its own selection. The indexers stay as stage 3 left them.

Stages 1 and 2 attend to every key (the indexers are not trained yet), stage 3 too (it learns the
dense distribution), stage 4 only to the keys DSA selects. The state is saved to
`state_dir` every `save_every` steps and at each stage's end, and a rerun continues from it.
Steps run under bfloat16 autocast when `autocast` is set (`jev convert --precision auto` sets it on a
GPU and where the CPU multiplies bfloat16 in hardware): a distillation step there took about half
float32's time.
On a CPU without it, bfloat16 autocast made an MLA layer's backward several times slower.
"""

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from jev.convert.llama import LlamaTeacher
from jev.model import Model
from jev.model.mla import AttentionBatch
from jev.model.precision import bfloat16_autocast
from jev.train.optim import build_optimizer, lr_at
from jev.train.state import STATE_FILE, find_train_state, load_train_state, save_train_state

STAGES = ("transfer", "distill", "indexer", "sparse")
# The stages that train DSA's selection or under it: they read longer rows (see `heal`).
DSA_STAGES = ("indexer", "sparse")


@dataclass(frozen=True)
class HealSettings:
    """Steps, batch and learning rate of each stage: `batch_size` rows per step, `dsa_batch_size` in the
    DSA stages (whose rows are longer)."""

    transfer_steps: int = 80
    distill_steps: int = 60
    indexer_steps: int = 30
    sparse_steps: int = 0
    batch_size: int = 4
    dsa_batch_size: int = 2
    transfer_lr: float = 5e-4
    distill_lr: float = 1e-4
    indexer_lr: float = 1e-3
    sparse_lr: float = 1e-4
    warmup: int = 10
    seed: int = 0
    save_every: int = 10
    # bfloat16 autocast for every step (weights and optimizer state stay float32).
    autocast: bool = False
    # Attention projections healing leaves as the closed form set them (`q_a_proj`, `o_proj`): those
    # stay derivable from the base (the identity, the source's own output projection), so a folder
    # does not store them.
    frozen: tuple[str, ...] = ()

    def steps(self, stage: str) -> int:
        return getattr(self, f"{stage}_steps")

    def batch(self, stage: str) -> int:
        return self.dsa_batch_size if stage in DSA_STAGES else self.batch_size

    def lr(self, stage: str) -> float:
        return getattr(self, f"{stage}_lr")

    def to_dict(self) -> dict:
        return {**asdict(self), "frozen": list(self.frozen)}


def stage_parameters(model: Model, stage: str, frozen: tuple[str, ...] = ()) -> list[torch.nn.Parameter]:
    """What a stage trains: every attention weight but the indexer's and the `frozen` projections; or
    the indexers alone."""
    params = []
    for layer in model.backbone.layers:
        for name, param in layer.self_attn.named_parameters():
            if name.split(".")[0] in frozen:
                continue
            if name.startswith("indexer.") == (stage == "indexer"):
                params.append(param)
    return params


def transfer_step(model: Model, teacher: LlamaTeacher, ids: torch.Tensor) -> float:
    """One backward of the layer-wise loss (each layer's own graph, freed as soon as it is done)."""
    with torch.no_grad():
        _, traces = teacher(ids, trace=True)
    size, length = ids.shape
    positions = torch.arange(length, device=ids.device).expand(size, length)
    cos, sin = model.backbone.rotary(positions, torch.float32)
    batch = AttentionBatch(positions, cos, sin, length, None, True)
    total = 0.0
    for layer, trace in zip(model.backbone.layers, traces, strict=True):
        target = trace.attention
        out = layer.self_attn(layer.input_layernorm(trace.residual), batch)
        loss = (out.float() - target.float()).pow(2).sum() / target.float().pow(2).sum() / len(traces)
        loss.backward()
        total += loss.item()
    return total


def distill_step(model: Model, teacher: LlamaTeacher, ids: torch.Tensor) -> float:
    """One backward of KL(source || converted) per token."""
    with torch.no_grad():
        target = teacher(ids)
    loss = next_token_kl(model(ids), target)
    loss.backward()
    return loss.item()


def indexer_step(model: Model, teacher: LlamaTeacher, ids: torch.Tensor) -> float:
    """One backward of the indexers' mean KL from their layers' attention (DSA's dense warm-up)."""
    _, loss = model.training_states(ids)
    loss.backward()
    return loss.item()


def next_token_kl(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over tokens of `KL(softmax(target) || softmax(logits))`, in float32; gradients reach
    `logits` only."""
    return _NextTokenKL.apply(logits, target.detach())


KL_ROWS = 32


class _NextTokenKL(torch.autograd.Function):
    """The KL and its gradient, `softmax(logits) - softmax(target)`, computed `KL_ROWS` token rows at a
    time in one pass. Over a whole batch the vocabulary-wide log-softmaxes (hundreds of MB each) took
    about 5 s of a distillation step on 2 cores; rows that stay in cache take about 1 s."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        vocab = logits.shape[-1]
        rows, targets = logits.reshape(-1, vocab), target.reshape(-1, vocab)
        grad = torch.empty_like(rows)
        total = torch.zeros((), dtype=torch.float64, device=logits.device)
        for start in range(0, len(rows), KL_ROWS):
            chunk = slice(start, start + KL_ROWS)
            log_p = torch.log_softmax(targets[chunk].float(), dim=-1)
            log_q = torch.log_softmax(rows[chunk].float(), dim=-1)
            p = log_p.exp()
            total += (p * (log_p - log_q)).sum(dtype=torch.float64)
            grad[chunk] = log_q.exp_().sub_(p)
        ctx.save_for_backward(grad)
        ctx.shape = logits.shape
        return (total / len(rows)).float()

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> tuple[torch.Tensor, None]:
        (grad,) = ctx.saved_tensors
        return (grad * (grad_output / len(grad)).to(grad.dtype)).view(ctx.shape), None


STEPS: dict[str, Callable[[Model, LlamaTeacher, torch.Tensor], float]] = {
    "transfer": transfer_step,
    "distill": distill_step,
    "indexer": indexer_step,
    "sparse": distill_step,
}


def heal(
    model: Model,
    teacher: LlamaTeacher,
    blocks: dict[str, torch.Tensor],
    settings: HealSettings,
    state_dir: Path,
    log: Callable[[str], None] = print,
) -> dict[str, list[dict]]:
    """Run (or finish) every stage on its token rows `blocks[stage] [N, T]`; return each stage's logged
    losses. The DSA stages' rows should be as long as the contexts DSA will select in: an indexer
    learns the positions its rows hold, and past them it misses most of the attention.

    A saved state names its stage and step and holds that stage's optimizer; stages before it are
    done, and the ones after it start fresh from its weights.
    """
    saved = read_progress(state_dir)
    history: dict[str, list[dict]] = saved["history"] if saved else {}
    for stage in STAGES:  # a state saved before a stage existed has no history for it
        history.setdefault(stage, [])
    for stage in STAGES:
        if saved and STAGES.index(stage) < STAGES.index(saved["stage"]):
            continue
        for param in model.parameters():
            param.requires_grad_(False)
        for param in stage_parameters(model, stage, settings.frozen):
            param.requires_grad_(True)
        optimizer = build_optimizer(model, settings.lr(stage), weight_decay=0.0, betas=(0.9, 0.95))
        start = 0
        if saved and saved["stage"] == stage:
            start = load_train_state(state_dir, model, optimizer)["step"]
        _run_stage(model, teacher, blocks[stage], settings, stage, optimizer, start, state_dir, history, log)
    for param in model.parameters():
        param.requires_grad_(True)
    return history


def read_progress(state_dir: Path) -> dict | None:
    """The `progress` of the state saved at `state_dir`, or None when there is none."""
    found = find_train_state(state_dir)
    return json.loads((found / STATE_FILE).read_text())["progress"] if found else None


def _run_stage(
    model: Model,
    teacher: LlamaTeacher,
    blocks: torch.Tensor,
    settings: HealSettings,
    stage: str,
    optimizer: torch.optim.Optimizer,
    start: int,
    state_dir: Path,
    history: dict[str, list[dict]],
    log: Callable[[str], None],
) -> None:
    total = settings.steps(stage)
    generator = torch.Generator().manual_seed(settings.seed + STAGES.index(stage))
    order = torch.randint(0, len(blocks), (total, settings.batch(stage)), generator=generator)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    model.train()
    began = time.perf_counter()
    with contextlib.nullcontext() if stage == "sparse" else model.attending_every_key():
        for step in range(start, total):
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, settings.lr(stage), settings.warmup, total)
            optimizer.zero_grad(set_to_none=True)
            with bfloat16_autocast(settings.autocast, model.device.type):
                loss = STEPS[stage](model, teacher, blocks[order[step]].to(model.device))
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            history[stage].append({"step": step + 1, "loss": round(loss, 5)})
            eta = (time.perf_counter() - began) / (step + 1 - start) * (total - step - 1)
            log(f"{stage} {step + 1}/{total} loss {loss:.4f} eta {eta / 60:.1f} min")
            if (step + 1) % settings.save_every == 0 or step + 1 == total:
                progress = {"stage": stage, "step": step + 1, "history": history}
                save_train_state(state_dir, model, optimizer, progress)
    model.eval()
