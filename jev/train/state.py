"""Saving and resuming a training run with no pickle: safetensors for tensors, JSON for the rest.

A run state is a folder:
    model.safetensors       the weights
    optimizer.safetensors   every per-parameter optimizer tensor, named `state.<param index>.<key>`
    rng.safetensors         torch's CPU (and CUDA) generator states, which are uint8 tensors
    state.json              the caller's progress (step, tokens, data position...), the optimizer's
                            param groups and non-tensor values, Python's `random` state

`torch.save` would pickle all of this, and loading a pickle can run code; these formats cannot.
The folder is written beside its final place and renamed into it, and `state.json` is written
last, so a run killed while saving leaves the previous state whole.
"""

import json
import random
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn
from torch.optim import Optimizer

from jev.schema import JevError

STATE_FILE = "state.json"


class TrainStateError(JevError, RuntimeError):
    """A run state folder that is incomplete or does not fit the model and optimizer it is loaded into."""


def save_train_state(folder: str | Path, model: nn.Module, optimizer: Optimizer, progress: dict[str, Any]) -> None:
    """Write the run state to `folder` atomically; `progress` must be JSON-serialisable."""
    folder = Path(folder)
    staging, previous = _sibling(folder, "tmp"), _sibling(folder, "old")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    save_model(model, str(staging / "model.safetensors"))
    tensors, optimizer_meta = _flatten_optimizer(optimizer.state_dict())
    save_file(tensors, staging / "optimizer.safetensors")
    save_file(_torch_rng_states(), staging / "rng.safetensors")
    meta = {"progress": progress, "optimizer": optimizer_meta, "python_random": _python_rng_state()}
    (staging / STATE_FILE).write_text(json.dumps(meta, indent=1) + "\n")
    shutil.rmtree(previous, ignore_errors=True)
    if folder.exists():
        folder.rename(previous)
    staging.rename(folder)
    shutil.rmtree(previous, ignore_errors=True)


def find_train_state(folder: str | Path) -> Path | None:
    """The complete state at `folder`, or the previous one if a save died between its two renames."""
    for candidate in (Path(folder), _sibling(Path(folder), "old")):
        if (candidate / STATE_FILE).is_file():
            return candidate
    return None


def load_train_state(folder: str | Path, model: nn.Module, optimizer: Optimizer) -> dict[str, Any]:
    """Restore weights, optimizer and RNG states in place and return the saved `progress`."""
    found = find_train_state(folder)
    if found is None:
        raise TrainStateError(f"no training state at {folder} (expected {STATE_FILE} there)")
    meta = json.loads((found / STATE_FILE).read_text())
    try:
        missing, unexpected = load_model(model, str(found / "model.safetensors"), strict=False)
        tensors = load_file(found / "optimizer.safetensors")
        rng = load_file(found / "rng.safetensors")
    except (OSError, RuntimeError) as exc:
        raise TrainStateError(f"cannot read the training state at {found}: {exc}") from exc
    if missing or unexpected:
        missing, unexpected = sorted(missing)[:5], sorted(unexpected)[:5]
        raise TrainStateError(f"{found} does not fit the model: missing {missing}, unexpected {unexpected}")
    optimizer.load_state_dict(_unflatten_optimizer(tensors, meta["optimizer"]))
    _restore_rng(rng, meta["python_random"])
    return meta["progress"]


def _sibling(folder: Path, suffix: str) -> Path:
    return folder.with_name(f"{folder.name}.{suffix}")


def _flatten_optimizer(state_dict: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split `optimizer.state_dict()` into named tensors and a JSON-ready remainder."""
    tensors: dict[str, torch.Tensor] = {}
    values: dict[str, dict[str, Any]] = {}
    for index, param_state in state_dict["state"].items():
        for key, value in param_state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{index}.{key}"] = value.detach().cpu().contiguous()
            else:
                values.setdefault(str(index), {})[key] = value
    return tensors, {"param_groups": state_dict["param_groups"], "values": values}


def _unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {int(index): dict(values) for index, values in meta["values"].items()}
    for name, tensor in tensors.items():
        _, index, key = name.split(".", 2)
        state.setdefault(int(index), {})[key] = tensor
    return {"state": state, "param_groups": meta["param_groups"]}


def _torch_rng_states() -> dict[str, torch.Tensor]:
    states = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        states.update({f"cuda.{i}": state for i, state in enumerate(torch.cuda.get_rng_state_all())})
    return states


def _python_rng_state() -> list[Any]:
    version, internal, gauss_next = random.getstate()
    return [version, list(internal), gauss_next]


def _restore_rng(tensors: dict[str, torch.Tensor], python_state: list[Any]) -> None:
    torch.set_rng_state(tensors["cpu"])
    cuda = [tensors[f"cuda.{i}"] for i in range(torch.cuda.device_count()) if f"cuda.{i}" in tensors]
    if cuda and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
    version, internal, gauss_next = python_state
    random.setstate((version, tuple(internal), gauss_next))
