"""`jev train drafter --kind eagle`: distil an EAGLE drafter on the target's own states.

As for DSpark, the frozen target reads each block the steps will use once, before the first step,
and its final hidden states are kept (bfloat16 under autocast). The drafter's vocabulary is the
`vocab_size` most frequent tokens of the training blocks, and its layer starts as a copy of the target's
last layer. A step reads every position of its blocks at once: entry t (the target's state at t,
token t + 1) predicts the state at t + 1, trained towards the target's next-token distribution p
there by cross-entropy over the vocabulary, -sum_{v in vocab} p_v log q_v (the KL up to the mass
q cannot hold), plus a smooth-L1 pull of the predicted state towards the real one (EAGLE's feature
loss). A second pass reads the first pass's predictions (detached) in place of the target's states
from position 1 on: what the drafter reads from its second draft on ("training-time test",
EAGLE-3), under the same losses.
"""

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from jev.generate.drafters.eagle import EagleDrafter, EagleNet, eagle_config
from jev.model import Model
from jev.model.precision import bfloat16_autocast, native_bfloat16
from jev.model.weights import Weights, store_weights
from jev.train.corpus import describe_source
from jev.train.drafter import DistillSettings, frequent_tokens
from jev.train.dspark import StepStates, target_states
from jev.train.optim import build_optimizer, lr_at
from jev.train.provenance import git_commit


@dataclass(kw_only=True)
class EagleSettings(DistillSettings):
    """One EAGLE distillation run: `vocab_size` tokens the drafter drafts, `feature_weight` the smooth-L1
    term's weight, `held_out_blocks` the blocks its acceptance is measured on."""

    vocab_size: int = 8192
    feature_weight: float = 1.0
    held_out_blocks: int = 64
    lr: float = 1e-3
    # The target's stored weights for its one-off pass, and bfloat16 autocast for the steps (None:
    # where the CPU computes in bfloat16 natively).
    weights: Weights = "auto"
    autocast: bool | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.vocab_size <= 0 or self.held_out_blocks <= 0 or self.feature_weight < 0:
            raise ValueError("vocab_size and held_out_blocks must be positive, feature_weight >= 0")


def init_from_target(net: EagleNet, target: Model) -> None:
    """The drafter's layer starts as the target's last layer; the fuse map at random, N(0, 0.02)."""
    net.layer.backbone.layers[0].load_state_dict(target.backbone.layers[-1].state_dict())
    net.layer.backbone.norm.load_state_dict(target.backbone.norm.state_dict())
    nn.init.normal_(net.fuse.weight, mean=0.0, std=0.02)


def eagle_loss(
    net: EagleNet,
    lm_head: nn.Module,
    embed: nn.Module,
    inputs: torch.Tensor,
    hidden: torch.Tensor,
    feature_weight: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Both passes' losses over `inputs [B, T]` with the target's states `hidden [B, T, D]` there, and
    per pass (detached) the cross-entropy, the feature loss and mean sum_v min(p, q) (T = 1 acceptance
    with the true states before it)."""
    with torch.no_grad():
        p_log = F.log_softmax(lm_head(hidden[:, 1:]).float(), dim=-1)
        p = p_log[..., net.vocab].exp()
    following = embed(inputs[:, 1:])
    features, truth = hidden[:, :-1], hidden[:, 1:].float()
    total = torch.zeros(())
    measured: dict[str, torch.Tensor] = {}
    for name in ("first", "second"):
        predicted, indexer_loss = net.layer.training_states(inputs_embeds=net.inputs(features, following))
        q_log = F.log_softmax(net.layer.lm_head(predicted).float(), dim=-1)
        cross_entropy = -(p * q_log).sum(-1).mean()
        feature = F.smooth_l1_loss(predicted.float(), truth)
        total = total + cross_entropy + feature_weight * feature + indexer_loss
        measured[f"{name}_ce"] = cross_entropy.detach()
        measured[f"{name}_feature"] = feature.detach()
        measured[f"{name}_acceptance"] = torch.minimum(p, q_log.detach().exp()).sum(-1).mean()
        features = torch.cat((hidden[:, :1], predicted[:, :-1].detach().to(hidden.dtype)), dim=1)
    return total, measured


def distill_eagle(settings: EagleSettings) -> Path:
    """Train the drafter on the target's states and write its folder; returns `settings.out`."""
    started = time.perf_counter()
    target, _, data = settings.load()
    if len(data.held_out) == 0:
        raise ValueError("the corpus gives no held-out block to measure the drafter on: add text")
    torch.manual_seed(settings.seed)
    vocab = frequent_tokens(data.train, settings.vocab_size, target.config.vocab_size)
    net = EagleNet(eagle_config(target.config, settings.vocab_size), vocab).attach(target)
    init_from_target(net, target)
    # The float32 head and embeddings train the drafter; storing the weights replaces the target's head.
    lm_head, embed = target.lm_head, target.backbone.embed_tokens
    store_weights(target, settings.weights)
    autocast = native_bfloat16() if settings.autocast is None else settings.autocast
    settings = replace(settings, weights=target.weights, autocast=autocast)
    dtype = torch.bfloat16 if autocast else torch.float32
    states = StepStates.read(target, data, settings, dtype)
    net.train()
    optimizer = build_optimizer(net, settings.lr, 0.1, (0.9, 0.95))
    history: list[dict[str, float]] = []
    for step in tqdm(range(settings.steps), desc="train drafter", unit="step"):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, settings.lr, settings.warmup, settings.steps)
        blocks, hidden = states.step(step)
        with bfloat16_autocast(autocast):
            inputs = data.train[blocks, :-1].long()
            loss, measured = eagle_loss(net, lm_head, embed, inputs, hidden, settings.feature_weight)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([w for w in net.parameters() if w.requires_grad], 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        history.append({name: float(value) for name, value in measured.items()})
    net.eval()
    held_out = data.held_out[: settings.held_out_blocks, :-1].long()
    held_out_states = target_states(target, held_out, settings.batch_size, dtype)
    measured = held_out_measures(net, lm_head, embed, held_out, held_out_states, settings.batch_size, autocast)
    drafter = EagleDrafter(net, target)
    drafter.save(settings.out, _provenance(settings, history, measured, started))
    return Path(settings.out)


@torch.no_grad()
def held_out_measures(
    net: EagleNet,
    lm_head: nn.Module,
    embed: nn.Module,
    blocks: torch.Tensor,
    hidden: torch.Tensor,
    rows: int,
    autocast: bool,
) -> dict[str, float]:
    """`eagle_loss`'s measures on held-out `blocks [N, T]`, `rows` blocks at a time, averaged over blocks."""
    totals: dict[str, float] = {}
    for start in range(0, len(blocks), rows):
        with bfloat16_autocast(autocast):
            part = slice(start, start + rows)
            _, measured = eagle_loss(net, lm_head, embed, blocks[part], hidden[part], 0.0)
        for name, value in measured.items():
            totals[name] = totals.get(name, 0.0) + float(value) * len(blocks[part])
    return {name: total / len(blocks) for name, total in totals.items()}


def _provenance(
    settings: EagleSettings, history: list[dict[str, float]], held_out: dict[str, float], started: float
) -> dict[str, Any]:
    recent = history[-10:]
    return {
        "target": str(settings.target),
        "texts": describe_source(settings.texts),
        "vocab_size": settings.vocab_size,
        "steps": settings.steps,
        "block_size": settings.block_size,
        "batch_size": settings.batch_size,
        "lr": settings.lr,
        "feature_weight": settings.feature_weight,
        "seed": settings.seed,
        "weights": settings.weights,
        "autocast": settings.autocast,
        "first": history[0],
        "final": {name: sum(row[name] for row in recent) / len(recent) for name in recent[0]},
        "held_out": held_out,
        "wall_seconds": time.perf_counter() - started,
        "git_commit": git_commit(),
    }
