"""A decider folder on disk: the backbone, tokenizer, heads and `jev.json`, with no pickle anywhere.

```
config.json, model.safetensors   the DeepSeek-V3.2 backbone, loadable by transformers
base.json                        (on a base) the package file the weights not stored come from
tokenizer.json                   byte-level BPE (HF tokenizers)
tokenizer_config.json            its special tokens, for transformers' AutoTokenizer
heads.safetensors                per task: field query embeddings and head weights
jev.json                         tasks (module reference, trained schema layout and hash, input
                                 token limit, rendering), calibrators, training provenance
drafter/                         (optional) the drafter that writes text fields speculatively
```
"""

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

from jev.decide.calibration import TaskCalibration
from jev.decide.kinds import kind_of
from jev.model import CheckpointError, Model
from jev.model.base import BASE_FILE
from jev.model.checkpoint import WEIGHTS_FILE
from jev.model.heads import HeadLayout, TaskHeads
from jev.schema import DecisionSpec
from jev.tokenizer import save_tokenizer

MANIFEST_FILE = "jev.json"
DRAFTER_DIR = "drafter"
HEADS_FILE = "heads.safetensors"
FORMAT_VERSION = 1


@dataclass
class TaskEntry:
    """What a checkpoint records of one task it was trained on."""

    reference: str
    layout: dict[str, Any]
    schema_hash: str
    max_input_tokens: int
    rendering: str = "fields"  # how the input is framed (`jev.decide.prompt`); older folders had only this one


@dataclass
class Manifest:
    """The contents of `jev.json`."""

    tasks: dict[str, TaskEntry]
    training: dict[str, Any] = field(default_factory=dict)
    calibrations: dict[str, TaskCalibration] = field(default_factory=dict)  # by task; `jev calibrate` fits them
    format_version: int = FORMAT_VERSION
    query_layer: int = 0  # the layer the field queries join the input at (`DecisionModel`)

    def to_json(self) -> str:
        raw = {
            "tasks": {name: asdict(entry) for name, entry in self.tasks.items()},
            "training": self.training,
            "calibration": {"tasks": {name: c.to_dict() for name, c in self.calibrations.items()}},
            "format_version": self.format_version,
            "query_layer": self.query_layer,
        }
        return json.dumps(raw, indent=2, sort_keys=True) + "\n"

    @classmethod
    def read(cls, folder: Path) -> "Manifest":
        file = folder / MANIFEST_FILE
        try:
            raw = json.loads(file.read_text())
            if raw.get("format_version") != FORMAT_VERSION:
                raise CheckpointError(
                    f"{file} has format_version {raw.get('format_version')!r}; this Jev reads {FORMAT_VERSION}"
                )
            tasks = {name: TaskEntry(**entry) for name, entry in raw["tasks"].items()}
            calibrations = {
                name: TaskCalibration.from_dict(fitted)
                for name, fitted in raw.get("calibration", {}).get("tasks", {}).items()
            }
            return cls(tasks, raw.get("training", {}), calibrations, raw["format_version"], raw.get("query_layer", 0))
        except FileNotFoundError as exc:
            raise CheckpointError(f"{folder} is not a Jev decider: no {MANIFEST_FILE}") from exc
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"{file} is corrupt or not a Jev manifest: {exc!r}") from exc


def head_layouts(spec: DecisionSpec) -> list[HeadLayout]:
    """One head per closed field, sized by its values (labels for multi-label fields)."""
    return [HeadLayout(f.name, f.n_values, kind_of(f).multilabel) for f in spec.closed_fields]


def save_heads(folder: Path, heads: dict[str, TaskHeads]) -> None:
    tensors = {
        f"{task}.{name}": tensor.detach().contiguous().clone()
        for task, module in heads.items()
        for name, tensor in module.state_dict().items()
    }
    save_file(tensors, folder / HEADS_FILE, metadata={"format": "pt"})


def load_heads(folder: Path, layouts: dict[str, list[HeadLayout]], hidden_size: int) -> dict[str, TaskHeads]:
    """Rebuild every task's heads and fill them, refusing missing or misshapen tensors."""
    try:
        tensors = load_file(folder / HEADS_FILE)
    except FileNotFoundError as exc:
        raise CheckpointError(f"{folder} has no {HEADS_FILE}") from exc
    except Exception as exc:  # safetensors raises its own error types for truncated or foreign files
        raise CheckpointError(f"cannot read {folder / HEADS_FILE}: {exc}") from exc
    heads = {}
    for task, fields in layouts.items():
        module = TaskHeads(hidden_size, fields)
        expected = module.state_dict()
        found = {name: tensors.get(f"{task}.{name}") for name in expected}
        for name, tensor in found.items():
            if tensor is None or tensor.shape != expected[name].shape:
                got = "missing" if tensor is None else f"shape {tuple(tensor.shape)}"
                raise CheckpointError(
                    f"{HEADS_FILE}: {task}.{name} is {got}, the task's schema needs {tuple(expected[name].shape)}"
                )
        module.load_state_dict(found)
        heads[task] = module
    return heads


def model_id(folder: Path) -> str:
    """A short fingerprint of the weights: responses name exactly which model answered.

    A folder on a base includes `base.json`, which carries the base file's own sha256."""
    digest = hashlib.sha256()
    for name in (WEIGHTS_FILE, HEADS_FILE, BASE_FILE):
        if name == BASE_FILE and not (folder / name).exists():
            continue
        with open(folder / name, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def save_bundle(
    folder: Path,
    model: Model,
    tokenizer: Tokenizer,
    tokenizer_config: dict,
    heads: dict[str, TaskHeads],
    manifest: Manifest,
) -> None:
    """Write every file of a decider folder."""
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    save_tokenizer(tokenizer, folder, tokenizer_config)
    save_heads(folder, heads)
    (folder / MANIFEST_FILE).write_text(manifest.to_json())
