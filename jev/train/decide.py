"""Decision fine-tuning: the backbone and every task's heads, trained together on labelled rows.

A plain loop: length-bucketed batches of one task at a time, summed per-field losses (cross-entropy
for single-choice fields, binary cross-entropy per label for multi-label ones) plus the DSA
indexer's warm-up loss, AdamW with warm-up and cosine decay, a validation pass after every epoch,
and the epoch with the lowest validation loss of the heads kept.

With `answer_weight > 0` the language model also learns to write each row's answer as JSON after
its input (`jev.schema.answer`; text fields included), so the checkpoint can answer by generating
too and can write its text fields. That loss is added with this weight (a task may set its own)
and reported per epoch; `answer_frozen_layers` keeps it out of the lowest layers' weights.

With `frozen_layers = N > 0` (the recipe a 2-core CPU affords on a pretrained backbone) the
embeddings and the lowest N layers keep the base's weights and the field queries join at layer N.
The input's states entering layer N then never change, so they are computed once per row (its
answer's too) and kept in bfloat16, and every step runs only the layers above. `frozen_mlps` keeps
their MLPs too, so a folder on a registry base stores only the attention weights it changed.

Training runs under bfloat16 autocast where the CPU has native bfloat16 arithmetic (AVX-512 BF16 or
AMX): there a step was measured at 0.4x float32's. Elsewhere it stays float32, since emulated bfloat16
matrix products are 8x slower than float32's (measured on an AVX2-only EPYC).

A task stops training once its validation loss has not improved for `patience` epochs; the folder
keeps the epoch with the lowest mean validation loss across tasks.
"""

import copy
import dataclasses
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from jev.data.examples import Example, read_examples
from jev.decide.bundle import HEADS_FILE, Manifest, head_layouts, load_heads
from jev.decide.decider import Decider
from jev.decide.decision import DecisionModel
from jev.decide.kinds import kind_of
from jev.generate.answer import AnswerTokens
from jev.model import Model
from jev.model.precision import bfloat16_autocast, native_bfloat16
from jev.schema import JevError, Task
from jev.tokenizer import load_tokenizer, load_tokenizer_config
from jev.train.distributed import Distributed
from jev.train.lm import PROVENANCE_FILE as LM_PROVENANCE_FILE
from jev.train.optim import build_optimizer, lr_at


@dataclass
class TaskData:
    """One task to train: its `module:NAME` reference and its train / validation JSONL files."""

    reference: str
    task: Task
    train: Path
    valid: Path
    answer_weight: float | None = None  # this task's answer-loss weight, when not the run's `answer_weight`


@dataclass
class DecideSettings:
    tasks: list[TaskData]
    base: Path
    out: Path
    epochs: int = 3
    batch_size: int = 16
    lr: float = 5e-4
    warmup_steps: int = 50
    weight_decay: float = 0.01
    max_input_tokens: int = 256
    indexer_weight: float = 1.0
    answer_weight: float = 0.0
    answer_frozen_layers: int = 0  # lowest layers whose weights the answer loss leaves to the heads
    frozen_layers: int | None = None  # None: `default_frozen_layers`
    frozen_mlps: bool = False  # the MLPs above `frozen_layers` keep the base's weights too
    patience: int = 1  # epochs without a better validation loss after which a task stops training
    autocast: bool | None = None  # bfloat16 autocast; None: where the CPU computes in bfloat16 natively
    rendering: str = "fields"  # how every task's input is framed (`jev.decide.prompt`)
    seed: int = 0
    skip_invalid: bool = False

    def provenance(self) -> dict:
        """The settings as JSON values, for `jev.json`'s training record."""
        return {
            "base": str(self.base), "epochs": self.epochs, "batch_size": self.batch_size, "lr": self.lr,
            "warmup_steps": self.warmup_steps, "weight_decay": self.weight_decay,
            "max_input_tokens": self.max_input_tokens, "indexer_weight": self.indexer_weight,
            "answer_weight": self.answer_weight, "answer_frozen_layers": self.answer_frozen_layers,
            "frozen_layers": self.frozen_layers, "frozen_mlps": self.frozen_mlps, "patience": self.patience,
            "autocast": self.autocast, "rendering": self.rendering, "seed": self.seed,
            "tasks": {d.task.name: {"reference": d.reference, "train": str(d.train), "valid": str(d.valid),
                                    "answer_weight": self.answer_weight_of(d)} for d in self.tasks},
        }

    def answer_weight_of(self, data: TaskData) -> float:
        """The task's own answer weight when it sets one, else the run's."""
        return self.answer_weight if data.answer_weight is None else data.answer_weight


@dataclass
class TaskSplits:
    train: list[Example]
    valid: list[Example]
    skipped: list[str]


def field_loss_terms(task: Task, logits: list[torch.Tensor], batch: list[Example]) -> dict[str, torch.Tensor]:
    """The mean loss of each closed field's head, by field name: cross-entropy for single-choice
    fields, binary cross-entropy per label for multi-label ones."""
    terms = {}
    for spec, field_logits in zip(task.spec.closed_fields, logits, strict=True):
        target = torch.tensor([example.label[spec.name] for example in batch], device=field_logits.device)
        terms[spec.name] = kind_of(spec).loss(field_logits, target)
    return terms


def field_losses(task: Task, logits: list[torch.Tensor], batch: list[Example]) -> torch.Tensor:
    """Sum over closed fields of the mean loss of each field's head."""
    return torch.stack(list(field_loss_terms(task, logits, batch).values())).sum()


def batches(examples: list[Example], batch_size: int, rng: random.Random) -> list[list[Example]]:
    """Shuffled batches of similar lengths: sort within windows of 50 batches, so padding stays small."""
    order = examples[:]
    rng.shuffle(order)
    window = batch_size * 50
    grouped = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lambda e: len(e.token_ids))
        grouped += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(grouped)
    return grouped


def answers_of(batch: list[Example]) -> list[list[int]] | None:
    """The batch's answer tokens, or None when the run does not train on answers."""
    return [e.answer_ids for e in batch] if batch[0].answer_ids else None


def lowers_of(batch: list[Example]) -> list[torch.Tensor] | None:
    """The batch's cached lower-layer states (as float32), or None when the run caches none."""
    return [e.lower_states.float() for e in batch] if batch[0].lower_states is not None else None


def with_lower_states(network: DecisionModel, examples: list[Example], batch_size: int, desc: str) -> list[Example]:
    """The examples with their states entering the query layer (input, then answer), in bfloat16.

    Rows run in length order, so a batch pads little; each row's states are those the served pass
    computes (`DecisionModel.input_states`).
    """
    order = sorted(range(len(examples)), key=lambda i: len(examples[i].token_ids) + len(examples[i].answer_ids))
    states: dict[int, torch.Tensor] = {}
    for start in tqdm(range(0, len(order), batch_size), desc=desc, unit="batch"):
        chunk = order[start : start + batch_size]
        rows = [examples[i].token_ids + examples[i].answer_ids for i in chunk]
        for i, row_states in zip(chunk, network.input_states(rows), strict=True):
            states[i] = row_states.to(torch.bfloat16).clone()
    return [dataclasses.replace(e, lower_states=states[i]) for i, e in enumerate(examples)]


def evaluate(model: DecisionModel, task: Task, examples: list[Example], batch_size: int) -> dict[str, float]:
    """Validation loss and per-field accuracy with inference-time (sparse) attention, and the answer
    loss (dense, per token) when the examples carry answers."""
    model.eval()
    loss, correct, count = 0.0, dict.fromkeys((f.name for f in task.spec.closed_fields), 0), 0
    answer_loss = 0.0
    with torch.no_grad():
        for start in range(0, len(examples), batch_size):
            batch = examples[start : start + batch_size]
            lowers = lowers_of(batch)
            logits = model(task.name, [e.token_ids for e in batch], lower_states=lowers).logits
            answers = answers_of(batch)
            if answers is not None:
                answer_loss += float(model.answer_loss([e.token_ids for e in batch], answers, 0, lowers)) * len(batch)
            loss += float(field_losses(task, logits, batch)) * len(batch)
            for spec, field_logits in zip(task.spec.closed_fields, logits, strict=True):
                target = torch.tensor([e.label[spec.name] for e in batch])
                correct[spec.name] += int(kind_of(spec).correct(field_logits, target).sum())
            count += len(batch)
    model.train()
    scores = {"loss": loss / count, **{f"accuracy.{name}": hits / count for name, hits in correct.items()}}
    if examples[0].answer_ids:
        scores["answer_loss"] = answer_loss / count
    return scores


def train_decisions(settings: DecideSettings) -> Path:
    """Fine-tune from `settings.base` and write a decider folder to `settings.out`.

    Under `torchrun` every rank takes its share of each batch and DDP averages the gradients;
    rank 0 writes the folder.
    """
    with Distributed.init() as ddp:
        decider = fit_decider(settings, ddp)
        if ddp.is_main:
            decider.save(settings.out)
        ddp.barrier()
    return settings.out


def fit_decider(settings: DecideSettings, ddp: Distributed) -> Decider:
    """The training loop; returns the decider with the best epoch's weights (the same on every rank)."""
    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    began = time.perf_counter()
    model = Model.from_pretrained(settings.base).train()
    layers = model.config.num_hidden_layers
    if not 0 <= settings.answer_frozen_layers <= layers:
        raise JevError(f"--answer-frozen-layers must be 0..{layers} for {settings.base}, "
                       f"got {settings.answer_frozen_layers}")
    names = [data.task.name for data in settings.tasks]
    frozen = default_frozen_layers(settings.base, names) if settings.frozen_layers is None else settings.frozen_layers
    if not 0 <= frozen < layers:
        raise JevError(f"--frozen-layers must be 0..{layers - 1} for {settings.base}, got {frozen}")
    if settings.patience < 1:
        raise JevError(f"--patience must be at least 1, got {settings.patience}")
    autocast = native_bfloat16() if settings.autocast is None else settings.autocast
    tasks = {data.reference: data.task for data in settings.tasks}
    decider = Decider.new(
        model, load_tokenizer(settings.base), tasks, settings.max_input_tokens,
        tokenizer_config=load_tokenizer_config(settings.base), query_layer=frozen, rendering=settings.rendering,
    )
    continued = continue_heads(decider, settings.base)
    if continued and ddp.is_main:
        print(f"continuing the heads of {sorted(continued)} from {settings.base}")

    def encode(task: Task, data: dict) -> list[int]:
        return decider.encode(task, data).token_ids

    network = decider.decision_model.train()
    if frozen:
        for parameter in [*model.backbone.embed_tokens.parameters(), *model.backbone.layers[:frozen].parameters()]:
            parameter.requires_grad_(False)
    if settings.frozen_mlps:
        for layer in model.backbone.layers[frozen:]:
            layer.mlp.requires_grad_(False)
    splits, caching = {}, 0.0
    for data in settings.tasks:
        weight = settings.answer_weight_of(data)
        eos = model.config.eos_token_id
        answer = AnswerTokens(data.task.spec, decider.tokenizer, eos).encode if weight > 0 else None
        train, skipped = read_examples(data.train, data.task, encode, settings.skip_invalid, answer)
        valid, skipped_valid = read_examples(data.valid, data.task, encode, settings.skip_invalid, answer)
        if frozen:
            name, cached = data.task.name, time.perf_counter()
            with bfloat16_autocast(autocast):
                train = with_lower_states(network, train, settings.batch_size, f"{name}: train rows to layer {frozen}")
                valid = with_lower_states(network, valid, settings.batch_size, f"{name}: valid rows to layer {frozen}")
            caching += time.perf_counter() - cached
        splits[data.task.name] = TaskSplits(train, valid, skipped + skipped_valid)
        if ddp.is_main:
            for line in skipped + skipped_valid:
                print(f"skipped {line}")

    # A step reaches one task's heads and never the LM head; DDP must be told to expect unused parameters.
    trainer = ddp.wrap(network, find_unused_parameters=True)
    trained = [parameter for parameter in network.parameters() if parameter.requires_grad]
    optimizer = build_optimizer(network, settings.lr, settings.weight_decay, betas=(0.9, 0.95))
    by_name = {data.task.name: data.task for data in settings.tasks}
    answer_weights = {data.task.name: settings.answer_weight_of(data) for data in settings.tasks}
    steps_per_epoch = sum(math.ceil(len(s.train) / settings.batch_size) for s in splits.values())
    total = steps_per_epoch * settings.epochs
    best_loss, best_state, best_epoch, history = math.inf, None, 0, []
    task_best = dict.fromkeys(splits, math.inf)
    stale = dict.fromkeys(splits, 0)
    step, tokens, started = 0, 0, time.perf_counter()
    progress = tqdm(total=total, desc="train decide", unit="step", disable=not ddp.is_main)
    for epoch in range(settings.epochs):
        training = [name for name in splits if stale[name] < settings.patience]
        if not training:
            break
        plan = [(name, batch) for name in training for batch in batches(splits[name].train, settings.batch_size, rng)]
        rng.shuffle(plan)
        progress.total = step + len(plan) * (settings.epochs - epoch)  # the ETA, as if the same tasks go on
        progress.refresh()
        for name, batch in plan:
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, settings.lr, settings.warmup_steps, total)
            shard = batch[ddp.rank :: ddp.world_size] or batch
            with bfloat16_autocast(autocast):
                outputs = trainer(name, [e.token_ids for e in shard], training=True, answers=answers_of(shard),
                                  answer_frozen_layers=settings.answer_frozen_layers, lower_states=lowers_of(shard))
                task_loss = field_losses(by_name[name], outputs.logits, shard)
                loss = task_loss + settings.indexer_weight * outputs.indexer_loss
                if outputs.answer_loss is not None:
                    loss = loss + answer_weights[name] * outputs.answer_loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trained, 1.0)
            optimizer.step()
            step += 1
            tokens += sum(len(e.token_ids) for e in shard) * ddp.world_size
            elapsed = time.perf_counter() - started
            progress.set_postfix(task=name, loss=f"{task_loss.item():.3f}", idx=f"{outputs.indexer_loss.item():.3f}",
                                 tok_s=f"{tokens / elapsed:.0f}")
            progress.update()
        with bfloat16_autocast(autocast):
            scores = {name: evaluate(network, by_name[name], split.valid, settings.batch_size)
                      for name, split in splits.items()}
        for name in training:
            if scores[name]["loss"] < task_best[name]:
                task_best[name], stale[name] = scores[name]["loss"], 0
            else:
                stale[name] += 1
                if stale[name] >= settings.patience and ddp.is_main:
                    progress.write(f"{name}: validation loss has not improved for {stale[name]} epochs; it stops")
        mean_loss = sum(s["loss"] for s in scores.values()) / len(scores)
        history.append({"epoch": epoch + 1, "step": step, "trained": training, **{n: s for n, s in scores.items()}})
        if ddp.is_main:
            progress.write(f"epoch {epoch + 1}: valid {_summary(scores)}")
        if mean_loss < best_loss:
            best_loss, best_epoch, best_state = mean_loss, epoch + 1, copy.deepcopy(network.state_dict())
    progress.close()
    network.load_state_dict(best_state)
    if ddp.is_main:
        kept = history[best_epoch - 1]
        print(f"kept epoch {best_epoch} of {len(history)}; validation: {_summary({n: kept[n] for n in splits})}")
    decider.manifest.training = {
        "settings": settings.provenance(),
        "base_training": _base_provenance(settings.base),
        "skipped_rows": {name: len(s.skipped) for name, s in splits.items()},
        "epochs": history,
        "best_epoch": best_epoch,
        "best_valid_loss": best_loss,
        "steps": step,
        "tokens": tokens,
        "seconds": round(time.perf_counter() - began, 1),
        "lower_states_seconds": round(caching, 1),
        "world_size": ddp.world_size,
    }
    return decider


# A task the base decider has no heads for also trains this many layers below the base's query layer:
# on examples/sotu (2,000 rows) that lifted `party` by 8 to 11 points over training from the query
# layer itself, `era` within a point (docs/benchmarks.md, "A user's own task").
NEW_TASK_LAYERS = 3


def default_frozen_layers(base: Path, task_names: list[str]) -> int:
    """What `--frozen-layers` defaults to: a base decider's query layer when every task is one of its own
    (their heads continue there), NEW_TASK_LAYERS lower when any is new to it; 0 for a plain backbone."""
    if not (base / HEADS_FILE).exists():
        return 0
    manifest = Manifest.read(base)
    if all(name in manifest.tasks for name in task_names):
        return manifest.query_layer
    return max(0, manifest.query_layer - NEW_TASK_LAYERS)


def _summary(scores: dict[str, dict[str, float]]) -> str:
    """Per task: its validation loss and each field's accuracy, on one line."""
    return "; ".join(
        f"{name} " + " ".join(f"{key.removeprefix('accuracy.')}={value:.4f}" for key, value in task.items())
        for name, task in scores.items()
    )


def continue_heads(decider: Decider, base: Path) -> list[str]:
    """Start each task's heads from the base's when the base is a decider with the same closed fields.

    Text fields have no heads, so a task that only gained a text field keeps its trained heads.
    """
    if not (base / HEADS_FILE).exists():
        return []
    manifest = Manifest.read(base)
    layouts = {
        name: head_layouts(task.spec)
        for name, task in decider.tasks.items()
        if name in manifest.tasks and _closed_layout(manifest.tasks[name].layout) == _closed_layout(task.spec.layout())
    }
    if not layouts:
        return []
    hidden = decider.model.config.hidden_size
    for name, heads in load_heads(base, layouts, hidden).items():
        decider.decision_model.heads[name].load_state_dict(heads.state_dict())
    return list(layouts)


def _closed_layout(layout: dict) -> list[dict]:
    return [f for f in layout["fields"] if f["kind"] != "text"]


def _base_provenance(base: Path) -> dict:
    """How the starting backbone was trained, when it says: `jev train lm` writes `train_lm.json`, a
    decider's `jev.json` holds its own training record."""
    record = base / LM_PROVENANCE_FILE
    if record.exists():
        return json.loads(record.read_text())
    return Manifest.read(base).training if (base / HEADS_FILE).exists() else {}

