"""Reading and writing model weights in transformers' DeepSeek-V3.2 safetensors layout.

Jev's modules carry transformers' parameter names except the backbone's prefix (`backbone.`
here, `model.` there), so conversion is a rename. Only safetensors is read: a pickle checkpoint
could run code when loaded, so it is refused.

A folder packed for shipping (`pack_weights`) stores its large matrices as GGUF Q8_0 blocks (int8
with one scale per 32 numbers, the format llama.cpp calls near-lossless) in uint8 tensors that the
file's metadata lists; reading dequantises them to float32, so the rest of Jev never sees them.
"""

import json
import re
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from jev.model.config import ModelConfig

WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
_PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt")
Q8_0_METADATA = "jev.q8_0"
_Q8_0_BLOCK = 32


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
            shard_tensors = read_safetensors(path / shard)
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


def read_safetensors(file: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file, Q8_0-packed matrices (`pack_weights`) dequantised to float32."""
    tensors, metadata = _raw_tensors(file)
    packed = json.loads(metadata.get(Q8_0_METADATA, "[]"))
    if packed:
        import gguf

        for name in packed:
            array = gguf.quants.dequantize(tensors[name].numpy(), gguf.GGMLQuantizationType.Q8_0)
            tensors[name] = torch.from_numpy(array.astype("float32"))
    return tensors


def pack_weights(file: Path) -> list[str]:
    """Rewrite a safetensors file with every float matrix whose rows split into 32-number blocks as Q8_0;
    return the names packed. Norms, vectors and odd-shaped tensors stay as they are."""
    import gguf

    tensors, metadata = _raw_tensors(file)
    packed = set(json.loads(metadata.get(Q8_0_METADATA, "[]")))
    new = [
        name for name, tensor in tensors.items()
        if name not in packed and tensor.dim() == 2 and tensor.is_floating_point()
        and tensor.shape[1] % _Q8_0_BLOCK == 0
    ]
    for name in new:
        blocks = gguf.quants.quantize(tensors[name].float().numpy(), gguf.GGMLQuantizationType.Q8_0)
        tensors[name] = torch.from_numpy(blocks)
    if new:
        metadata[Q8_0_METADATA] = json.dumps(sorted(packed | set(new)))
        save_file(tensors, file, metadata=metadata)
    return sorted(packed | set(new))


def drop_weights(file: Path, names: set[str]) -> None:
    """Rewrite a safetensors file without the `names` tensors (packed or not); the rest byte for byte."""
    tensors, metadata = _raw_tensors(file)
    packed = json.loads(metadata.get(Q8_0_METADATA, "[]"))
    if packed:
        metadata[Q8_0_METADATA] = json.dumps([name for name in packed if name not in names])
    save_file({name: t for name, t in tensors.items() if name not in names}, file, metadata=metadata)


def _raw_tensors(file: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with safe_open(file, "pt") as handle:
        names = handle.keys()  # a safetensors handle is not iterable
        return {name: handle.get_tensor(name) for name in names}, dict(handle.metadata() or {})
