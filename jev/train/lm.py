"""Language-model pretraining of the MLA + DSA backbone: one plain loop, nanoGPT style.

Each step: take this rank's shard of the step's global batch, run the dense training forward,
add the DSA indexer's KL warm-up loss to the next-token loss, backward (DDP averages gradients
across ranks), clip, AdamW step. Around the loop sit the progress bar, held-out evaluation,
checkpoints to `out/train_state/` (resumed automatically) and, at the end, the model folder.
"""

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn
from tqdm import tqdm

from jev.model import Model, ModelConfig
from jev.tokenizer import TOKENIZER_FILE, check_jev_specials, load_tokenizer, save_tokenizer
from jev.train.blocks import TokenBlocks
from jev.train.corpus import TextSource, describe_source, read_documents
from jev.train.distributed import Distributed
from jev.train.optim import build_optimizer, lr_at
from jev.train.provenance import git_commit
from jev.train.state import TrainStateError, find_train_state, load_train_state, save_train_state
from jev.train.tokenizer import train_tokenizer

TRAIN_STATE_DIR = "train_state"
PROVENANCE_FILE = "train_lm.json"
# How many recent steps the reported final training loss averages over (one step is noisy).
_RECENT = 10


@dataclass
class LMSettings:
    """Everything one pretraining run depends on. `batch_size` is global: ranks split it."""

    model: ModelConfig
    texts: TextSource
    out: Path
    block_size: int = 256
    batch_size: int = 16
    steps: int = 1000
    lr: float = 1e-3
    warmup: int = 100
    seed: int = 0
    save_every: int = 250
    eval_every: int = 100
    indexer_weight: float = 1.0
    tokenizer: Path | None = None
    vocab_size: int | None = None
    resume: bool = False
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    held_out_fraction: float = 0.05
    eval_blocks: int = 64

    def __post_init__(self) -> None:
        for name in ("block_size", "batch_size", "steps", "save_every"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.block_size > self.model.max_position_embeddings:
            raise ValueError(
                f"block_size ({self.block_size}) exceeds the model's max_position_embeddings "
                f"({self.model.max_position_embeddings})"
            )
        if not 0 <= self.held_out_fraction < 1:
            raise ValueError(f"held_out_fraction must be in [0, 1), got {self.held_out_fraction}")

    def model_config(self) -> ModelConfig:
        """The architecture trained: `model`, with `vocab_size` replacing its vocabulary size if given."""
        return self.model if self.vocab_size is None else replace(self.model, vocab_size=self.vocab_size)

    def to_json(self) -> dict[str, Any]:
        values = {k: v for k, v in asdict(self).items() if k not in ("model", "texts")}
        values.update(out=str(self.out), tokenizer=None if self.tokenizer is None else str(self.tokenizer))
        values.update(betas=list(self.betas), texts=describe_source(self.texts), model=self.model_config().to_dict())
        return values


@dataclass
class Progress:
    """The run's counters, saved with every checkpoint and reported in the provenance file."""

    run: dict[str, Any]
    step: int = 0
    tokens_seen: int = 0
    first_loss: float | None = None
    recent_losses: list[float] = field(default_factory=list)
    recent_indexer_losses: list[float] = field(default_factory=list)
    evals: list[dict[str, float]] = field(default_factory=list)
    train_seconds: float = 0.0
    wall_seconds: float = 0.0

    def record(self, loss: float, indexer_loss: float, tokens: int, seconds: float) -> None:
        self.step += 1
        self.tokens_seen += tokens
        self.train_seconds += seconds
        self.first_loss = loss if self.first_loss is None else self.first_loss
        self.recent_losses = [*self.recent_losses, loss][-_RECENT:]
        self.recent_indexer_losses = [*self.recent_indexer_losses, indexer_loss][-_RECENT:]


class NextTokenLoss(nn.Module):
    """The training objective as a module, so that DDP's forward (and gradient hooks) cover all of it.

    `forward(blocks [B, T + 1]) -> (next-token cross-entropy, indexer KL)`, both scalars.
    """

    def __init__(self, model: Model) -> None:
        super().__init__()
        self.model = model

    def forward(self, blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets = blocks[:, :-1], blocks[:, 1:]
        hidden, indexer_loss = self.model.training_states(inputs)
        logits = self.model.lm_head(hidden)
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten()), indexer_loss


def pretrain(settings: LMSettings) -> Path:
    """Train (or resume) a language model and write the model folder `settings.out`; returns it."""
    started = time.perf_counter()
    out = Path(settings.out)
    state_dir = out / TRAIN_STATE_DIR
    resuming = find_train_state(state_dir) is not None
    if settings.resume and not resuming:
        raise TrainStateError(f"nothing to resume: no training state in {state_dir}")
    with Distributed.init() as ddp:
        config = settings.model_config()
        documents = read_documents(settings.texts)
        tokenizer = _tokenizer_for(settings, documents, config.vocab_size, resuming, ddp)
        data = TokenBlocks.build(tokenizer, documents, settings.block_size, settings.held_out_fraction)

        torch.manual_seed(settings.seed)
        model = Model(config)
        init_weights(model)
        model = model.to(ddp.device).train()
        optimizer = build_optimizer(model, settings.lr, settings.weight_decay, settings.betas)
        progress = Progress(run=_run_identity(settings, config, data))
        if resuming:
            progress = _resume(state_dir, model, optimizer, progress.run)
        objective = ddp.wrap(NextTokenLoss(model), find_unused_parameters="sparse" in config.mlp_layer_types)
        wall_before = progress.wall_seconds
        tokens_per_step = settings.batch_size * settings.block_size

        bar = tqdm(total=settings.steps, initial=progress.step, desc="pretrain", unit="step", disable=not ddp.is_main)
        while progress.step < settings.steps:
            if _eval_due(progress, settings):
                progress.evals.append(evaluate(model, data.held_out[: settings.eval_blocks], settings, progress, ddp))
            step_started = time.perf_counter()
            lr = lr_at(progress.step, settings.lr, settings.warmup, settings.steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            blocks = data.batch(progress.step, settings.batch_size, settings.seed, ddp.rank, ddp.world_size)
            lm_loss, indexer_loss = objective(blocks.to(ddp.device))
            (lm_loss + settings.indexer_weight * indexer_loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

            losses = ddp.all_reduce_mean(torch.stack([lm_loss.detach(), indexer_loss.detach()])).tolist()
            progress.record(losses[0], losses[1], tokens_per_step, time.perf_counter() - step_started)
            bar.update(1)
            bar.set_postfix(
                loss=f"{losses[0]:.3f}",
                idx=f"{losses[1]:.3f}",
                lr=f"{lr:.2e}",
                tok_s=f"{progress.tokens_seen / progress.train_seconds:.0f}",
            )
            if ddp.is_main and (progress.step % settings.save_every == 0 or progress.step == settings.steps):
                progress.wall_seconds = wall_before + time.perf_counter() - started
                save_train_state(state_dir, model, optimizer, _saved_progress(progress, data, settings))
        bar.close()
        if settings.eval_every > 0 and not _evaluated_now(progress):
            progress.evals.append(evaluate(model, data.held_out[: settings.eval_blocks], settings, progress, ddp))

        if ddp.is_main:
            progress.wall_seconds = wall_before + time.perf_counter() - started
            model.save_pretrained(out)
            save_tokenizer(tokenizer, out)
            provenance = _provenance(settings, progress, data, len(documents), tokenizer.get_vocab_size(), ddp)
            (out / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n")
        ddp.barrier()
    return out


@torch.no_grad()
def evaluate(
    model: Model, blocks: torch.Tensor, settings: LMSettings, progress: Progress, ddp: Distributed
) -> dict[str, float]:
    """Held-out loss and perplexity: under training's dense attention, and as served (DSA top-k).

    Ranks score disjoint blocks and average their sums, so every rank returns the same numbers.
    """
    model.eval()
    totals = torch.zeros(4, dtype=torch.float64, device=ddp.device)
    for chunk in blocks[ddp.rank :: ddp.world_size].split(max(1, settings.batch_size // ddp.world_size)):
        chunk = chunk.long().to(ddp.device)
        inputs, targets = chunk[:, :-1], chunk[:, 1:].flatten()
        hidden, indexer_loss = model.training_states(inputs)
        dense = F.cross_entropy(model.lm_head(hidden).flatten(0, 1).float(), targets, reduction="sum")
        served = F.cross_entropy(model(inputs).flatten(0, 1).float(), targets, reduction="sum")
        count = dense.new_tensor(targets.numel())
        totals += torch.stack([dense, served, indexer_loss * count, count]).double()
    model.train()
    dense, served, indexer, count = ddp.all_reduce_mean(totals).tolist()
    if count == 0:
        return {"step": progress.step}
    return {
        "step": progress.step,
        "val_loss": dense / count,
        "val_ppl": float(torch.tensor(dense / count).exp()),
        "val_ppl_topk": float(torch.tensor(served / count).exp()),
        "val_indexer_loss": indexer / count,
    }


def init_weights(model: Model, std: float = 0.02) -> None:
    """Draw every projection and embedding from N(0, std), GPT-2 / nanoGPT's initialisation.

    PyTorch's default N(0, 1) embeddings would dwarf what each layer adds to the residual stream
    at the start; small weights also start the loss near ln(vocab_size).
    """
    for module in model.modules():
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)


def _tokenizer_for(
    settings: LMSettings, documents: list[str], vocab_size: int, resuming: bool, ddp: Distributed
) -> Tokenizer:
    """The given tokenizer; else the run's own, trained once by rank 0 and read by every rank."""
    if settings.tokenizer is not None:
        tokenizer = load_tokenizer(settings.tokenizer)
    else:
        saved = Path(settings.out) / TOKENIZER_FILE
        if ddp.is_main and not (resuming and saved.is_file()):
            save_tokenizer(train_tokenizer(documents, vocab_size), settings.out)
        ddp.barrier()
        tokenizer = load_tokenizer(saved)
    check_jev_specials(tokenizer, str(settings.tokenizer or saved))
    if tokenizer.get_vocab_size() > vocab_size:
        raise ValueError(
            f"the tokenizer has {tokenizer.get_vocab_size()} tokens but the model's vocab_size is {vocab_size}"
        )
    return tokenizer


def _run_identity(settings: LMSettings, config: ModelConfig, data: TokenBlocks) -> dict[str, Any]:
    """What a saved state must share with the run resuming it: the architecture and the data order."""
    return {
        "model": config.to_dict(),
        "block_size": settings.block_size,
        "batch_size": settings.batch_size,
        "seed": settings.seed,
        "corpus_fingerprint": data.fingerprint,
    }


def _resume(state_dir: Path, model: Model, optimizer: torch.optim.Optimizer, run: dict[str, Any]) -> Progress:
    saved = load_train_state(state_dir, model, optimizer)
    saved.pop("data_position", None)
    progress = Progress(**saved)
    for key, value in run.items():
        if progress.run.get(key) != value:
            raise TrainStateError(
                f"{state_dir} was saved by a run with another {key}; resume with the same settings and corpus, "
                "or train into a new --out"
            )
    return progress


def _saved_progress(progress: Progress, data: TokenBlocks, settings: LMSettings) -> dict[str, Any]:
    """The progress plus where the next batch comes from, for a person reading the state."""
    epoch, batch = data.position(progress.step, settings.batch_size)
    return {**asdict(progress), "data_position": {"epoch": epoch, "batch": batch}}


def _evaluated_now(progress: Progress) -> bool:
    return bool(progress.evals) and progress.evals[-1]["step"] == progress.step


def _eval_due(progress: Progress, settings: LMSettings) -> bool:
    return settings.eval_every > 0 and progress.step % settings.eval_every == 0 and not _evaluated_now(progress)


def _provenance(
    settings: LMSettings, progress: Progress, data: TokenBlocks, n_documents: int, vocab: int, ddp: Distributed
) -> dict[str, Any]:
    return {
        "settings": settings.to_json(),
        "steps": progress.step,
        "tokens_seen": progress.tokens_seen,
        "first_loss": progress.first_loss,
        "final_loss": _mean(progress.recent_losses),
        "final_indexer_loss": _mean(progress.recent_indexer_losses),
        "evals": progress.evals,
        "train_seconds": progress.train_seconds,
        "wall_seconds": progress.wall_seconds,
        "tokens_per_second": progress.tokens_seen / progress.train_seconds if progress.train_seconds else None,
        "world_size": ddp.world_size,
        "corpus": {
            "documents": n_documents,
            "tokens": data.stream_tokens,
            "train_blocks": len(data.train),
            "held_out_blocks": len(data.held_out),
            "fingerprint": data.fingerprint,
        },
        "tokenizer_vocab_size": vocab,
        "git_commit": git_commit(),
        "torch": torch.__version__,
    }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
