"""One conversion run: source -> closed-form MLA -> healing -> a DeepSeek-V3.2 model folder.

The folder holds `config.json` and `model.safetensors` (transformers' DeepSeek-V3.2 layout), the
source's tokenizer as `tokenizer.json` and `tokenizer_config.json` (chat template kept), and
`convert.json`: the source's identity and hash, the ranks, the healing settings and every stage's
losses. The healing state lives in `out/heal_state` until the folder is written, so a stopped run
continues where it left off when the same command is run again. With `init`, healing starts from
an already converted folder instead of the closed form: a longer healing run reuses a finished one,
and an indexer of another shape (heads, head size) can be trained anew on attention already healed.
"""

import json
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from jev.convert.closed_form import MLARanks, collect_statistics, convert, equal_to_source, target_config
from jev.convert.heal import DSA_STAGES, STAGES, HealSettings, heal, read_progress
from jev.convert.llama import LlamaTeacher
from jev.convert.source import LlamaSource, SourceError, read_source
from jev.model import Model, ModelConfig
from jev.model.checkpoint import to_checkpoint_name
from jev.schema import JevError
from jev.train.corpus import describe_source, read_documents
from jev.train.provenance import git_commit

PROVENANCE_FILE = "convert.json"
STATE_DIR = "heal_state"
# What an `init` folder's indexer may differ in from the run's ranks: its shape (it then starts
# random, as after the closed form), and `index_topk` (no weight depends on it).
INDEXER_SHAPE = ("index_n_heads", "index_head_dim")


@dataclass
class ConvertSettings:
    """Everything a conversion depends on."""

    source: Path
    out: Path
    # Groups of healing text (each a list of files or folders), drawn from in equal shares: a small
    # group (the chat split, 5% of the tokens) heals as much as a large one.
    corpus: list[list[Path]]
    ranks: MLARanks = field(default_factory=MLARanks)
    heal: HealSettings = field(default_factory=HealSettings)
    block_size: int = 512
    # Rows of the DSA stages (indexer, sparse): the indexers learn positions only up to their rows'
    # length, and past it they miss most of the attention (docs/conversion.md).
    dsa_block_size: int = 1024
    calibration_blocks: int = 32
    max_blocks: int = 4096
    init: Path | None = None
    # Where healing runs: the closed form and the folder's weights are always computed on the CPU.
    device: str = "cpu"


class CorpusError(JevError):
    """A healing corpus too short for the rows a run asks for."""


def corpus_ids(source: LlamaSource, paths: list[Path]) -> list[int]:
    """The corpus as one token sequence, documents joined by the end-of-sequence token."""
    separator = source.config.eos_token_id
    ids: list[int] = []
    for encoding in source.tokenizer.encode_batch(read_documents(paths)):
        ids.extend(encoding.ids)
        if separator is not None:
            ids.append(separator)
    return ids


def corpus_blocks(ids: list[int], block_size: int, max_blocks: int, seed: int) -> torch.Tensor:
    """`ids` cut into `[N, block_size]` token blocks, shuffled, at most `max_blocks` of them."""
    n_blocks = len(ids) // block_size
    if n_blocks == 0:
        raise CorpusError(
            f"the corpus gives {len(ids)} tokens, fewer than one row of {block_size} "
            "(--block-size and --dsa-block-size set the rows)"
        )
    blocks = torch.tensor(ids[: n_blocks * block_size]).view(n_blocks, block_size)
    order = torch.randperm(n_blocks, generator=torch.Generator().manual_seed(seed))
    return blocks[order[:max_blocks]]


def interleaved_blocks(groups: list[list[int]], block_size: int, max_blocks: int, seed: int) -> torch.Tensor:
    """Each group's shuffled blocks taken in turn, a smaller group starting over when it runs out,
    until the largest is used up or there are `max_blocks`: a stage draws its rows uniformly from
    them, so each group gets an equal share. One group gives `corpus_blocks` unchanged."""
    per_group = [corpus_blocks(ids, block_size, max_blocks, seed + i) for i, ids in enumerate(groups)]
    rounds = max(len(blocks) for blocks in per_group)
    rows = [blocks[r % len(blocks)] for r in range(rounds) for blocks in per_group]
    return torch.stack(rows[:max_blocks])


def run_conversion(settings: ConvertSettings, log=print) -> Path:
    """Convert, heal (or finish healing) and write the model folder; returns its path."""
    began = time.perf_counter()
    source = read_source(settings.source)
    teacher = LlamaTeacher(source).eval()
    groups = [corpus_ids(source, paths) for paths in settings.corpus]
    blocks = interleaved_blocks(groups, settings.block_size, settings.max_blocks, settings.heal.seed)
    dsa_blocks = interleaved_blocks(groups, settings.dsa_block_size, settings.max_blocks, settings.heal.seed)
    state_dir = settings.out / STATE_DIR
    if read_progress(state_dir) is not None:
        log(f"resuming the healing saved in {state_dir}")
        model = Model(target_config(source.config, settings.ranks))
    elif settings.init is not None:
        log(f"healing further from {settings.init}")
        model = from_init(settings.init, target_config(source.config, settings.ranks), settings.heal.seed, log)
    else:
        log(f"closed-form conversion from {len(blocks[: settings.calibration_blocks])} calibration blocks")
        statistics = collect_statistics(teacher, blocks[: settings.calibration_blocks])
        model = convert(source, settings.ranks, statistics, seed=settings.heal.seed)
    rows = {stage: dsa_blocks if stage in DSA_STAGES else blocks[settings.calibration_blocks :] for stage in STAGES}
    model.to(settings.device)
    history = heal(model, teacher.to(settings.device), rows, settings.heal, state_dir, log)
    write_folder(model.cpu(), source, settings, history, time.perf_counter() - began)
    shutil.rmtree(state_dir, ignore_errors=True)
    return settings.out


def from_init(folder: Path, config: ModelConfig, seed: int, log=print) -> Model:
    """The converted `folder` with `config`: its weights as they are, except an indexer of another
    shape, which starts random (seeded as `convert` seeds it); any other difference is refused."""
    model = Model.from_pretrained(folder)
    may_differ = ("index_topk", *INDEXER_SHAPE)
    if replace(model.config, **{name: getattr(config, name) for name in may_differ}) != config:
        raise SourceError(f"{folder} was converted with other ranks than this run's; pass the same ranks")
    if all(getattr(model.config, name) == getattr(config, name) for name in INDEXER_SHAPE):
        model.config = config
        for layer in model.backbone.layers:
            layer.self_attn.index_topk = config.index_topk
        return model
    log(f"a new indexer of {config.index_n_heads} heads of {config.index_head_dim}, from random weights")
    torch.manual_seed(seed)
    fresh = Model(config)
    weights = {name: t for name, t in model.state_dict().items() if ".indexer." not in name}
    missing, unexpected = fresh.load_state_dict(weights, strict=False)
    if unexpected or any(".indexer." not in name for name in missing):
        raise SourceError(f"{folder}'s weights do not fit: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return fresh.eval()


def write_folder(model: Model, source: LlamaSource, settings: ConvertSettings, history: dict, seconds: float) -> None:
    out = settings.out
    model.base = source.base({to_checkpoint_name(name): llama for name, llama in equal_to_source(model.config).items()})
    model.save_pretrained(out)
    source.tokenizer.save(str(out / "tokenizer.json"))
    tokenizer_config = {k: v for k, v in source.tokenizer_config.items() if not k.endswith("_token_id")}
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    provenance = {
        "source": source.origin,
        "init": _init_provenance(settings.init),
        "ranks": settings.ranks.to_dict(),
        "heal": settings.heal.to_dict(),
        "block_size": settings.block_size,
        "dsa_block_size": settings.dsa_block_size,
        "calibration_blocks": settings.calibration_blocks,
        "max_blocks": settings.max_blocks,
        "corpus": [describe_source(paths) for paths in settings.corpus],
        "history": history,
        "seconds": round(seconds),
        "threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name(settings.device) if settings.device.startswith("cuda") else "cpu",
        "git_commit": git_commit(),
    }
    (out / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=1) + "\n")


def _init_provenance(init: Path | None) -> dict | None:
    """What a run that healed further started from: the folder and that folder's own provenance (a
    decider folder, whose backbone was fine-tuned after its conversion, has none of its own)."""
    if init is None:
        return None
    provenance = init / PROVENANCE_FILE
    return {"folder": str(init), "provenance": json.loads(provenance.read_text()) if provenance.exists() else None}
