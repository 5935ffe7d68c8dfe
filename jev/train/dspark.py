"""`jev train drafter --kind dspark`: distil a DSpark drafter on the target's outputs and calibrate it.

The frozen target reads each training block the run will use once, before the first step, and its
final hidden states are kept (bfloat16 under autocast): a step then runs only the drafter and the
target's LM head, not the target's layers, and a block read again in a later epoch costs no more.
Each step picks `anchors` positions i per block of its batch. From the target's hidden state at
i - 1 and token t_i the drafter predicts positions i + 1 .. i + K; position j is trained towards the
target's own distribution there (`objective`: by KL(p_target || q_drafter), by TV(p, q), the chance
the accept rule rejects the draft at T = 1, or by their sum), with the text's t_{i+j-1} as the
Markov head's previous token (teacher forcing, as the AR drafter reads the text). The confidence
head learns, by binary cross-entropy, DSpark's label c* = sum_v min(p, q) = 1 - TV(p, q), the chance
position j is accepted when the ones before it were.

Calibration then drafts for real on held-out blocks (T = 1, the Markov head reading the drafted
tokens), verifies each block with the target and records which prefixes the accept rule keeps.
An isotonic map from raw survival (the running product of the head's estimates) to those
outcomes is fitted on every other anchor and its ECE reported on the rest; it is stored with the
drafter as plain numbers.
"""

import itertools
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from jev.calibration.calibrators import IsotonicCalibration
from jev.calibration.metrics import equal_width_bins
from jev.generate.accept import SamplingSettings, accept_ratio, warp
from jev.generate.drafters.dspark import DSparkConfig, DSparkDrafter, DSparkHead, saved_weights
from jev.generate.drafters.protocol import DRAFTER_FILE
from jev.model import Model
from jev.model.precision import bfloat16_autocast, native_bfloat16
from jev.model.weights import Weights, store_weights
from jev.train.blocks import TokenBlocks
from jev.train.corpus import describe_source
from jev.train.drafter import DistillSettings, frequent_tokens
from jev.train.optim import build_optimizer, lr_at
from jev.train.provenance import git_commit

OBJECTIVES = ("kl", "tv", "kl+tv")


@dataclass(kw_only=True)
class DSparkSettings(DistillSettings):
    """One DSpark distillation run: `config` is the drafter's shape, `anchors` the drafted blocks trained
    per text block and step, `calibration_stride` the spacing of held-out anchors, `vocab_size` the
    most frequent training tokens it drafts over (`jev.generate.drafters.vocabulary`; the target's
    vocabulary size or more: all of it). It trains against the whole vocabulary; the vocabulary is
    fixed before its confidence head is calibrated. The default steps are the shipped drafter's."""

    config: DSparkConfig
    steps: int = 1500
    anchors: int = 16
    vocab_size: int = 8192
    calibration_blocks: int = 64
    calibration_stride: int = 4
    # The target's stored weights for its one-off pass and the calibration (`jev.model.weights`), and
    # bfloat16 autocast for the steps (None: where the CPU computes in bfloat16 natively).
    weights: Weights = "auto"
    autocast: bool | None = None
    # What the drafted distributions are trained by: KL(p || q), the total variation 1 - sum min(p, q)
    # (the chance the accept rule rejects a draft at T = 1), or their sum.
    objective: Literal["kl", "tv", "kl+tv"] = "kl"
    # A DSpark drafter folder of this shape whose weights the run starts from (None: random), to
    # go on training a drafter, by another objective or on other text.
    init: Path | None = None
    # gamma: drafted position j's distillation loss weighs exp(-(j - 1) / gamma), as in DSpark's loss
    # (gamma 4 there): a later draft counts only when every one before it is accepted. 0: alike.
    position_decay: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("anchors", "calibration_blocks", "calibration_stride", "vocab_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.position_decay < 0:
            raise ValueError(f"position_decay must be 0 or more, got {self.position_decay}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if self.block_size <= self.config.positions:
            raise ValueError(
                f"block_size ({self.block_size}) must exceed the positions drafted ({self.config.positions})"
            )


def init_head(head: DSparkHead, std: float = 0.02) -> None:
    """N(0, std) projections and embeddings; the Markov head's output starts at zero, so training
    starts from the parallel drafter and the bias grows only as far as it helps."""
    for module in head.modules():
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)
    nn.init.normal_(head.position, mean=0.0, std=std)
    if head.markov:
        nn.init.zeros_(head.markov_out.weight)


def target_states(target: Model, blocks: torch.Tensor, rows: int, dtype: torch.dtype) -> torch.Tensor:
    """The target's final hidden states `[N, T, D]` over `blocks [N, T]`, `rows` blocks a pass, kept in `dtype`."""
    states = torch.empty(*blocks.shape, target.config.hidden_size, dtype=dtype)
    with torch.inference_mode():
        for start in tqdm(range(0, len(blocks), rows), desc="target states", unit="pass"):
            states[start : start + rows] = target.hidden_states(blocks[start : start + rows].long()).to(dtype)
    return states


@dataclass
class StepStates:
    """The frozen target's final hidden states over exactly the blocks a run's steps read, each block
    read once (a short run reads a small part of a large corpus; a block read again costs nothing)."""

    order: list[torch.Tensor]
    rows: torch.Tensor
    states: torch.Tensor

    @classmethod
    def read(cls, target: Model, data: TokenBlocks, settings: DistillSettings, dtype: torch.dtype) -> "StepStates":
        order = [data.batch_indices(step, settings.batch_size, settings.seed) for step in range(settings.steps)]
        used, rows = torch.cat(order).unique(return_inverse=True)
        return cls(order, rows, target_states(target, data.train[used, :-1], settings.batch_size, dtype))

    def step(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Step `step`'s block indices into `data.train` and the target's states over them `[B, T, D]`."""
        batch = len(self.order[step])
        return self.order[step], self.states[self.rows[step * batch : (step + 1) * batch]]


def dspark_loss(
    head: DSparkHead,
    lm_head: nn.Module,
    embed: nn.Module,
    inputs: torch.Tensor,
    hidden: torch.Tensor,
    anchors: int,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """KL(p_target || q) and TV(p_target, q) per drafted position `[positions]`, the confidence head's loss
    over random anchors of `inputs [B, T]`, and the label c* `[positions]` (mean acceptance per drafted
    position, T = 1).

    `hidden [B, T, D]` is the target's final hidden states over `inputs`; `lm_head` and `embed` are its
    head and embeddings, so p_target is `softmax(lm_head(hidden))` at the drafted positions."""
    k = head.config.positions
    batch, length = inputs.shape
    starts = torch.randint(1, length - k + 1, (batch, anchors), generator=generator)
    rows = torch.arange(batch).view(-1, 1)
    offsets = starts.unsqueeze(-1) + torch.arange(k)
    previous = inputs[rows.unsqueeze(-1), offsets].flatten(0, 1)
    with torch.no_grad():
        p_log = F.log_softmax(lm_head(hidden[rows.unsqueeze(-1), offsets].flatten(0, 1)).float(), dim=-1)
        p = p_log.exp()
    logits, acceptance = head(hidden[rows, starts - 1].flatten(0, 1), embed(previous), lm_head)
    q_log = F.log_softmax(logits.float(), dim=-1)
    kl = (p * (p_log - q_log)).sum(-1).mean(0)
    overlap = torch.minimum(p, q_log.exp()).sum(-1)
    label = overlap.detach().clamp(0, 1)
    confidence = F.binary_cross_entropy_with_logits(acceptance.float(), label)
    return kl, 1 - overlap.mean(0), confidence, label.mean(0)


def position_weights(positions: int, gamma: float) -> torch.Tensor:
    """`[positions]` exp(-(j - 1) / gamma), scaled to a mean of 1 (the loss keeps its size); ones for gamma 0."""
    if gamma == 0:
        return torch.ones(positions)
    weights = torch.exp(-torch.arange(positions, dtype=torch.float32) / gamma)
    return weights / weights.mean()


@torch.no_grad()
def acceptance_outcomes(
    drafter: DSparkDrafter, blocks: torch.Tensor, stride: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draft K tokens at every `stride`-th anchor of held-out `blocks [N, T]` at T = 1, verify with
    the target and run the accept rule: raw survival `[A, N, K]` and accepted-prefix outcomes `[A, N, K]`.

    One latent cache follows the text from anchor to anchor, so each verify pass reads only the
    pending token and the K drafts."""
    target, k = drafter.target, drafter.max_draft_len
    blocks = blocks.long()
    hidden = target.hidden_states(blocks)
    settings = SamplingSettings.build(len(blocks))
    cache = target.new_cache(len(blocks), blocks.shape[1] + k)
    raw, accepted = [], []
    for i in range(1, blocks.shape[1], stride):
        target(blocks[:, int(cache.lengths[0]) : i], cache=cache)  # the cache holds the text before i
        uniforms = torch.rand(len(blocks), 2 * k, generator=generator, dtype=torch.float64)
        draft = drafter.draft(hidden[:, i - 1], blocks[:, i], settings, uniforms[:, :k])
        p = warp(target(torch.cat((blocks[:, i : i + 1], draft.tokens), dim=1), cache=cache)[:, :k], settings)
        cache.truncate(torch.full((len(blocks),), i))
        drafted = draft.tokens.unsqueeze(-1)
        ratio = accept_ratio(p.gather(-1, drafted), draft.probs.gather(-1, drafted)).squeeze(-1)
        raw.append(draft.survival)
        accepted.append((uniforms[:, k:] < ratio.double()).to(torch.int64).cumprod(dim=1))
    return torch.stack(raw), torch.stack(accepted)


def fit_survival_calibration(raw: torch.Tensor, accepted: torch.Tensor) -> IsotonicCalibration:
    """One isotonic map from raw survival to P(prefix accepted), pooled over positions: a monotone
    map of a non-increasing sequence stays non-increasing."""
    return IsotonicCalibration().fit(raw.flatten().double().numpy(), accepted.flatten().numpy())


def survival_ece(survival: torch.Tensor, accepted: torch.Tensor, n_bins: int = 15) -> float:
    """Expected calibration error of survival estimates against prefix outcomes (equal-width bins)."""
    stats = equal_width_bins(survival.flatten().double().numpy(), accepted.flatten().double().numpy(), n_bins)
    weights = stats.count / stats.count.sum()
    return float(np.sum(weights * np.abs(stats.mean_outcome - stats.mean_confidence)))


def calibrate(drafter: DSparkDrafter, held_out: torch.Tensor, stride: int, seed: int) -> dict[str, Any]:
    """Fit the drafter's survival calibration on held-out outcomes (in place) and return what was measured."""
    drafter.calibration = None
    raw, accepted = acceptance_outcomes(drafter, held_out, stride, torch.Generator().manual_seed(seed))
    fit, check = slice(0, None, 2), slice(1, None, 2)
    drafter.calibration = fit_survival_calibration(raw[fit], accepted[fit])
    report: dict[str, Any] = {
        "anchors": int(raw.shape[0] * raw.shape[1]),
        "held_out_tau_t1": 1.0 + float(accepted.sum(-1).double().mean()),
        "held_out_survival_t1": accepted.double().mean((0, 1)).tolist(),
    }
    if raw.shape[0] > 1:
        calibrated = drafter.calibrated(raw[check].flatten(0, 1)).view_as(raw[check])
        report["ece_raw"] = survival_ece(raw[check], accepted[check])
        report["ece_calibrated"] = survival_ece(calibrated, accepted[check])
    return report


def distill_dspark(settings: DSparkSettings) -> Path:
    """Train, calibrate and write the drafter folder; returns `settings.out`."""
    started = time.perf_counter()
    target, _, data = settings.load()
    if len(data.held_out) == 0:
        raise ValueError("the corpus gives no held-out block to calibrate the confidence head on: add text")
    # The float32 head and embeddings train the drafter; storing the weights replaces the target's head.
    lm_head, embed = target.lm_head, target.backbone.embed_tokens
    store_weights(target, settings.weights)
    autocast = native_bfloat16() if settings.autocast is None else settings.autocast
    settings = replace(settings, weights=target.weights, autocast=autocast)
    states = StepStates.read(target, data, settings, torch.bfloat16 if autocast else torch.float32)
    torch.manual_seed(settings.seed)
    head = DSparkHead(settings.config)
    if settings.init is None:
        init_head(head)
    else:
        head.load_state_dict(saved_weights(settings.init))
    head.train()
    optimizer = build_optimizer(head, settings.lr, 0.1, (0.9, 0.95))
    generator = torch.Generator().manual_seed(settings.seed)
    losses: list[float] = []
    acceptance: list[torch.Tensor] = []
    weights = position_weights(settings.config.positions, settings.position_decay)
    progress = tqdm(range(settings.steps), desc="train drafter", unit="step")
    for step in progress:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, settings.lr, settings.warmup, settings.steps)
        blocks, hidden = states.step(step)
        inputs = data.train[blocks, :-1].long()
        with bfloat16_autocast(autocast):
            kl, tv, confidence, label = dspark_loss(
                head, lm_head, embed, inputs, hidden, settings.anchors, generator
            )
        distill = {"kl": kl, "tv": tv, "kl+tv": kl + tv}[settings.objective]
        ((weights * distill).mean() + confidence).backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(kl.detach().mean()))
        acceptance.append(label)
        if step % 10 == 0:
            progress.set_postfix(kl=f"{recent_kl(losses):.3f}")
    vocab = None
    if settings.vocab_size < target.config.vocab_size:
        vocab = frequent_tokens(data.train, settings.vocab_size, target.config.vocab_size)
    drafter = DSparkDrafter(head.eval(), target, vocab=vocab)
    report = calibrate(
        drafter, data.held_out[: settings.calibration_blocks, :-1], settings.calibration_stride, settings.seed
    )
    drafter.save(settings.out, _provenance(settings, losses, acceptance, report, started))
    return Path(settings.out)


def recent_kl(losses: list[float]) -> float:
    """The mean KL of the last 10 steps: what the progress bar shows and `drafter.json` keeps as final."""
    return sum(losses[-10:]) / len(losses[-10:])


def kl_by_tenth(losses: list[float]) -> list[float]:
    """The mean KL over each tenth of the steps (fewer parts for a run under ten steps): whether a longer
    run would still have gained."""
    parts = min(10, len(losses))
    bounds = [round(i * len(losses) / parts) for i in range(parts + 1)]
    return [sum(losses[a:b]) / (b - a) for a, b in itertools.pairwise(bounds)]


def _trained(folder: Path) -> dict[str, Any]:
    """What the drafter a run starts from recorded of its own training."""
    return json.loads((Path(folder) / DRAFTER_FILE).read_text())


def _provenance(
    settings: DSparkSettings,
    losses: list[float],
    acceptance: list[torch.Tensor],
    calibration: dict[str, Any],
    started: float,
) -> dict[str, Any]:
    recent_acceptance = torch.stack(acceptance[-10:]).mean(0)
    return {
        "target": str(settings.target),
        "texts": describe_source(settings.texts),
        "config": asdict(settings.config),
        "markov": settings.config.markov_rank > 0,
        "steps": settings.steps,
        "block_size": settings.block_size,
        "batch_size": settings.batch_size,
        "anchors": settings.anchors,
        "vocab_size": min(settings.vocab_size, settings.config.vocab_size),
        "lr": settings.lr,
        "seed": settings.seed,
        "weights": settings.weights,
        "autocast": settings.autocast,
        "objective": settings.objective,
        "position_decay": settings.position_decay,
        "init": None if settings.init is None else {"folder": str(settings.init), "trained": _trained(settings.init)},
        "first_kl": losses[0],
        "final_kl": recent_kl(losses),
        "kl_by_tenth": kl_by_tenth(losses),
        "train_acceptance_by_position_t1": recent_acceptance.tolist(),
        "calibration": calibration,
        "wall_seconds": time.perf_counter() - started,
        "git_commit": git_commit(),
    }
