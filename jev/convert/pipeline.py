"""One conversion run: source -> closed-form MLA -> healing -> a DeepSeek-V3.2 model folder.

The folder holds `config.json` and `model.safetensors` (transformers' DeepSeek-V3.2 layout), the
source's tokenizer as `tokenizer.json` and `tokenizer_config.json` (chat template kept), and
`convert.json`: the source's identity and hash, the ranks, the healing settings and every stage's
losses. The healing state lives in `out/heal_state` until the folder is written, so a stopped run
continues where it left off when the same command is run again. With `init`, healing starts from
an already converted folder instead of the closed form: a longer healing run reuses a finished one.
"""

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from jev.convert.closed_form import MLARanks, collect_statistics, convert, equal_to_source, target_config
from jev.convert.heal import HealSettings, heal, read_progress
from jev.convert.llama import LlamaTeacher
from jev.convert.source import LlamaSource, SourceError, read_source
from jev.model import Model
from jev.model.checkpoint import to_checkpoint_name
from jev.train.corpus import describe_source, read_documents
from jev.train.provenance import git_commit

PROVENANCE_FILE = "convert.json"
STATE_DIR = "heal_state"


@dataclass
class ConvertSettings:
    """Everything a conversion depends on."""

    source: Path
    out: Path
    corpus: list[Path]
    ranks: MLARanks = field(default_factory=MLARanks)
    heal: HealSettings = field(default_factory=HealSettings)
    block_size: int = 512
    calibration_blocks: int = 32
    max_blocks: int = 4096
    init: Path | None = None


def corpus_blocks(source: LlamaSource, paths: list[Path], block_size: int, max_blocks: int, seed: int) -> torch.Tensor:
    """The corpus as `[N, block_size]` token blocks, documents joined by the end-of-sequence token, shuffled."""
    separator = source.config.eos_token_id
    ids: list[int] = []
    for encoding in source.tokenizer.encode_batch(read_documents(paths)):
        ids.extend(encoding.ids)
        if separator is not None:
            ids.append(separator)
    n_blocks = len(ids) // block_size
    if n_blocks == 0:
        raise ValueError(f"the corpus gives {len(ids)} tokens, fewer than one block of {block_size}")
    blocks = torch.tensor(ids[: n_blocks * block_size]).view(n_blocks, block_size)
    order = torch.randperm(n_blocks, generator=torch.Generator().manual_seed(seed))
    return blocks[order[:max_blocks]]


def run_conversion(settings: ConvertSettings, log=print) -> Path:
    """Convert, heal (or finish healing) and write the model folder; returns its path."""
    began = time.perf_counter()
    source = read_source(settings.source)
    teacher = LlamaTeacher(source).eval()
    blocks = corpus_blocks(source, settings.corpus, settings.block_size, settings.max_blocks, settings.heal.seed)
    state_dir = settings.out / STATE_DIR
    if read_progress(state_dir) is not None:
        log(f"resuming the healing saved in {state_dir}")
        model = Model(target_config(source.config, settings.ranks))
    elif settings.init is not None:
        log(f"healing further from {settings.init}")
        model = Model.from_pretrained(settings.init)
        if model.config != target_config(source.config, settings.ranks):
            raise SourceError(f"{settings.init} was converted with other ranks than this run's; pass the same ranks")
    else:
        log(f"closed-form conversion from {len(blocks[: settings.calibration_blocks])} calibration blocks")
        statistics = collect_statistics(teacher, blocks[: settings.calibration_blocks])
        model = convert(source, settings.ranks, statistics, seed=settings.heal.seed)
    history = heal(model, teacher, blocks[settings.calibration_blocks :], settings.heal, state_dir, log)
    write_folder(model, source, settings, history, time.perf_counter() - began)
    shutil.rmtree(state_dir, ignore_errors=True)
    return settings.out


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
        "calibration_blocks": settings.calibration_blocks,
        "corpus": describe_source(settings.corpus),
        "history": history,
        "seconds": round(seconds),
        "threads": torch.get_num_threads(),
        "git_commit": git_commit(),
    }
    (out / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=1) + "\n")


def _init_provenance(init: Path | None) -> dict | None:
    """What a run that healed further started from: the folder and that folder's own provenance."""
    if init is None:
        return None
    return {"folder": str(init), "provenance": json.loads((init / PROVENANCE_FILE).read_text())}
