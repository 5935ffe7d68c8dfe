"""The process's place in a torchrun job: rank, world size, device, and the few collectives training uses.

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; without them the run is a
single process and every collective is a no-op, so the training loop reads the same either way.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


@dataclass(frozen=True)
class Distributed:
    """Where this process sits in the job. Use as `with Distributed.init() as ddp: ...`."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    owns_group: bool = False

    @classmethod
    def init(cls, env: Mapping[str, str] | None = None) -> "Distributed":
        """Join the torchrun process group (gloo on CPU, NCCL on CUDA), or stay single-process."""
        env = os.environ if env is None else env
        if "WORLD_SIZE" not in env or int(env["WORLD_SIZE"]) == 1:
            return cls()
        missing = [key for key in ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if key not in env]
        if missing:
            raise RuntimeError(f"WORLD_SIZE is set but {missing} are not: start multi-process runs with torchrun")
        rank, world_size, local_rank = int(env["RANK"]), int(env["WORLD_SIZE"]), int(env["LOCAL_RANK"])
        if torch.cuda.is_available():
            torch.cuda.set_device(local_rank)
        if dist.is_initialized():
            return cls(rank, world_size, local_rank)
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", rank=rank, world_size=world_size)
        return cls(rank, world_size, local_rank, owns_group=True)

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that prints progress and writes files."""
        return self.rank == 0

    @property
    def device(self) -> torch.device:
        return torch.device(f"cuda:{self.local_rank}") if torch.cuda.is_available() else torch.device("cpu")

    @property
    def _active(self) -> bool:
        return self.world_size > 1 and dist.is_initialized()

    def barrier(self) -> None:
        if self._active:
            dist.barrier()

    def wrap(self, module: nn.Module, find_unused_parameters: bool = False) -> nn.Module:
        """DDP around `module` in a multi-process job (gradients averaged in backward), else `module`.

        `find_unused_parameters` is needed when some parameters can miss a step's graph (MoE experts
        that no token was routed to).
        """
        if not self._active:
            return module
        device_ids = [self.local_rank] if self.device.type == "cuda" else None
        return DistributedDataParallel(module, device_ids=device_ids, find_unused_parameters=find_unused_parameters)

    def all_reduce_mean(self, tensor: torch.Tensor) -> torch.Tensor:
        """The mean of `tensor` over all ranks, as a new tensor (the input is left as it was)."""
        out = tensor.detach().clone()
        if self._active:
            dist.all_reduce(out, op=dist.ReduceOp.SUM)
            out /= self.world_size
        return out

    def close(self) -> None:
        """Leave the process group, if this context created it (a caller's own group is left alone)."""
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()

    def __enter__(self) -> "Distributed":
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
