"""Reading and writing model weights in transformers' DeepSeek-V3.2 safetensors layout.

Jev's modules carry transformers' parameter names except the backbone's prefix (`backbone.`
here, `model.` there), so conversion is a rename. Only safetensors is read: a pickle checkpoint
could run code when loaded, so it is refused.
"""

import json
import re
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from jev.model.config import ModelConfig

WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
_PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt")


class CheckpointError(RuntimeError):
    """A checkpoint folder that is missing files or does not match its config."""


def to_checkpoint_name(name: str) -> str:
    return "model." + name.removeprefix("backbone.") if name.startswith("backbone.") else name


def from_checkpoint_name(name: str) -> str:
    return "backbone." + name.removeprefix("model.") if name.startswith("model.") else name


def read_weights(path: Path, config: ModelConfig) -> dict[str, torch.Tensor]:
    """All tensors of a folder, renamed to Jev's names; multi-token-prediction layers are skipped."""
    if (path / INDEX_FILE).exists():
        shards = sorted(set(json.loads((path / INDEX_FILE).read_text())["weight_map"].values()))
    elif (path / WEIGHTS_FILE).exists():
        shards = [WEIGHTS_FILE]
    elif any((path / name).exists() for name in _PICKLE_FILES):
        raise CheckpointError(f"{path} holds only pickle weights; Jev loads safetensors only (they cannot run code)")
    else:
        raise CheckpointError(f"no {WEIGHTS_FILE} or {INDEX_FILE} in {path}")
    layer = re.compile(r"^model\.layers\.(\d+)\.")
    tensors: dict[str, torch.Tensor] = {}
    for shard in shards:
        try:
            shard_tensors = load_file(path / shard)
        except Exception as exc:  # safetensors raises its own error types for truncated or foreign files
            raise CheckpointError(f"cannot read {path / shard}: {exc}") from exc
        for name, tensor in shard_tensors.items():
            match = layer.match(name)
            if match and int(match.group(1)) >= config.num_hidden_layers:
                continue
            tensors[from_checkpoint_name(name)] = tensor
    return tensors


def check_weights(expected: dict[str, torch.Tensor], found: dict[str, torch.Tensor], tied: bool) -> None:
    """Refuse missing, unexpected or wrongly shaped tensors, naming them."""
    missing = sorted(set(expected) - set(found) - ({"lm_head.weight"} if tied else set()))
    unexpected = sorted(set(found) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"weights do not match config.json: missing {[to_checkpoint_name(n) for n in missing[:5]]}"
            f"{' ...' if len(missing) > 5 else ''}, unexpected {[to_checkpoint_name(n) for n in unexpected[:5]]}"
        )
    for name, tensor in found.items():
        if tensor.shape != expected[name].shape:
            raise CheckpointError(
                f"{to_checkpoint_name(name)} has shape {tuple(tensor.shape)}, config.json implies "
                f"{tuple(expected[name].shape)}"
            )


def write_weights(path: Path, state: dict[str, torch.Tensor], tied: bool) -> None:
    """Save tensors under transformers' names (tied LM head left out, as transformers does)."""
    tensors = {
        to_checkpoint_name(name): tensor.detach().contiguous().clone()
        for name, tensor in state.items()
        if not (tied and name == "lm_head.weight")
    }
    save_file(tensors, path / WEIGHTS_FILE, metadata={"format": "pt"})
