"""`jev train drafter`: distil a drafter from the target on text (`--kind autoregressive`, the default, or `dspark`).

This module trains the autoregressive kind; `jev.train.dspark` trains the DSpark kind.

The drafter is a `jev.model.Model` with a small `ModelConfig` (1-2 layers) and the target's
tokenizer. Each step minimises KL(p_target || q_drafter) of the next-token distributions over a
batch of text blocks, plus the drafter's own DSA indexer warm-up loss. KL to the whole target
distribution, not cross-entropy on the text, because acceptance is `sum min(p, q)`: the drafter
should match what the target would say, not what the corpus says. The output folder
(`config.json`, `model.safetensors`, `tokenizer.json`, `drafter.json`) loads with
`AutoregressiveDrafter.load` or `jev.generate.drafters.load_drafter`.
"""

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from tqdm import tqdm

from jev.model import Model, ModelConfig
from jev.tokenizer import load_tokenizer, load_tokenizer_config, save_tokenizer
from jev.train.blocks import TokenBlocks
from jev.train.corpus import TextSource, describe_source, read_documents
from jev.train.lm import init_weights
from jev.train.optim import build_optimizer, lr_at
from jev.train.provenance import git_commit

PROVENANCE_FILE = "drafter.json"


def drafter_config(target: ModelConfig, layers: int = 1, hidden_size: int = 128) -> ModelConfig:
    """A small DeepSeek-V3.2 config with the target's vocabulary and special ids: dense MLP layers."""
    heads = max(1, hidden_size // 64)
    return replace(
        target,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        first_k_dense_replace=layers,
        n_routed_experts=0,
        mlp_layer_types=[],
        tie_word_embeddings=False,
    )


@dataclass(kw_only=True)
class DistillSettings:
    """What every drafter distillation run shares: the target, its text, the output folder and the steps."""

    target: Path
    texts: TextSource
    out: Path
    block_size: int = 128
    batch_size: int = 8
    steps: int = 300
    lr: float = 2e-3
    warmup: int = 20
    seed: int = 0
    held_out_fraction: float = 0.05

    def __post_init__(self) -> None:
        for name in ("block_size", "batch_size", "steps"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    def load(self) -> tuple[Model, Tokenizer, TokenBlocks]:
        """The frozen target, its tokenizer, and the text as blocks with the target's own bos/eos ids."""
        target = Model.from_pretrained(self.target).eval().requires_grad_(False)
        tokenizer = load_tokenizer(Path(self.target))
        data = TokenBlocks.build(
            tokenizer, read_documents(self.texts), self.block_size, self.held_out_fraction,
            target.config.bos_token_id, target.config.eos_token_id,
        )
        return target, tokenizer, data

    def save_tokenizer(self, tokenizer: Tokenizer) -> None:
        """The target's tokenizer and its config (specials, chat template) into the drafter's folder."""
        save_tokenizer(tokenizer, Path(self.out), load_tokenizer_config(Path(self.target)))


def frequent_tokens(blocks: torch.Tensor, n: int, vocab_size: int) -> torch.Tensor:
    """The `n` most frequent ids of `blocks` (ties to the lower id), increasing; `n <= vocab_size`."""
    if not 0 < n <= vocab_size:
        raise ValueError(f"the drafter's vocabulary must hold 1 to {vocab_size} tokens, not {n}")
    counts = torch.bincount(blocks.flatten().long(), minlength=vocab_size).double()
    counts -= torch.arange(vocab_size, dtype=torch.float64) / vocab_size  # a lower id wins a tie
    return counts.topk(n).indices.sort().values


@dataclass(kw_only=True)
class DrafterSettings(DistillSettings):
    """One autoregressive distillation run. `config` is the drafter's architecture (see `drafter_config`)."""

    config: ModelConfig


def distillation_loss(drafter: Model, target: Model, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean KL(p_target || q_drafter) over the `[B, T]` positions, and the drafter's indexer loss."""
    with torch.no_grad():
        target_log = F.log_softmax(target(inputs).float(), dim=-1)
    hidden, indexer_loss = drafter.training_states(inputs)
    drafter_log = F.log_softmax(drafter.lm_head(hidden).float(), dim=-1)
    kl = F.kl_div(drafter_log.flatten(0, 1), target_log.flatten(0, 1), log_target=True, reduction="batchmean")
    return kl, indexer_loss


@torch.no_grad()
def held_out_acceptance(drafter: Model, target: Model, blocks: torch.Tensor) -> float:
    """Mean `sum_v min(p, q)` at T=1 on held-out blocks: the expected per-position acceptance."""
    if len(blocks) == 0:
        return float("nan")
    inputs = blocks[:, :-1].long()
    p = target(inputs).float().softmax(-1)
    q = drafter(inputs).float().softmax(-1)
    return float(torch.minimum(p, q).sum(-1).mean())


def distill(settings: DrafterSettings) -> Path:
    """Train the drafter and write its folder; returns `settings.out`."""
    started = time.perf_counter()
    target, tokenizer, data = settings.load()
    if settings.config.vocab_size != target.config.vocab_size:
        raise ValueError(
            f"the drafter's vocab_size ({settings.config.vocab_size}) must equal the target's "
            f"({target.config.vocab_size})"
        )
    torch.manual_seed(settings.seed)
    drafter = Model(settings.config)
    init_weights(drafter)
    drafter.train()
    optimizer = build_optimizer(drafter, settings.lr, 0.1, (0.9, 0.95))
    losses: list[float] = []
    for step in tqdm(range(settings.steps), desc="train drafter", unit="step"):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, settings.lr, settings.warmup, settings.steps)
        blocks = data.batch(step, settings.batch_size, settings.seed).long()
        kl, indexer_loss = distillation_loss(drafter, target, blocks[:, :-1])
        (kl + indexer_loss).backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(kl.detach()))
    drafter.eval()
    out = Path(settings.out)
    drafter.save_pretrained(out)
    settings.save_tokenizer(tokenizer)
    provenance = _provenance(settings, losses, held_out_acceptance(drafter, target, data.held_out[:16]), started)
    (out / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n")
    return out


def _provenance(settings: DrafterSettings, losses: list[float], acceptance: float, started: float) -> dict[str, Any]:
    recent = losses[-10:]
    return {
        "kind": "autoregressive",
        "target": str(settings.target),
        "texts": describe_source(settings.texts),
        "config": settings.config.to_dict(),
        "steps": settings.steps,
        "block_size": settings.block_size,
        "batch_size": settings.batch_size,
        "lr": settings.lr,
        "seed": settings.seed,
        "first_kl": losses[0] if losses else None,
        "final_kl": sum(recent) / len(recent) if recent else None,
        "held_out_acceptance_t1": acceptance,
        "wall_seconds": time.perf_counter() - started,
        "git_commit": git_commit(),
    }
