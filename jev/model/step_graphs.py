"""Cached passes replayed as traced graphs: a decode step without Python between its torch calls.

Why: a plain decode step of the shipped model at one sequence makes about 3,600 torch calls, some
120 per layer, most of them views, casts and small products. Issued from Python they take about
1.5x as long as the same calls replayed by TorchScript's graph executor (a greedy generation's
tokens per second at one sequence, `benchmarks/decode_anchor.py`). The executor runs the same aten
kernels in the same order and fuses nothing on a CPU, so a replayed pass gives exactly the eager
pass's numbers (`tests/test_step_graphs.py`).

A trace records the branches its own pass took, so a pass is replayed only where nothing branches
on data or on a size: it extends a cache (a decode step or a verify pass), it runs on the CPU
without autograd or autocast through dense MLPs (MoE routes by data), the model's products do
not change form with the number of rows (`Model.replays_pass`: mixed weights switch to bfloat16
blocks at 8 sequences), and each layer whose indexer selects (past `index_topk` keys) reads the
selection as a mask made in one product of scores (`Indexer.select_mask`, which ranks every query of
a cached pass and records the exact ranking of ties whatever the traced pass's own). The sizes a
trace does not fix are the sequences, the tokens each extends by and the keys: the latents come
in as the cache's first n_keys slots, and n_keys is read from their shape, so it is recorded as a
size. So one graph per dtype, per cache with or without indexer keys, and per set of selecting
layers, serves every such pass.

Tracing costs about 1.2 s on 2 cores, and the executor's first runs about 0.4 s more (it optimizes
the graph for what it has seen), so `Model.replay_cached_passes` does both up front for what a
one-sequence generation meets and then `settle`s the graphs: from then on they replay without the
executor optimizing again (`torch.jit.optimized_execution(False)`). Left optimizing, it kept a plan
for the shapes it met, and a server's resident memory grew by 10.7% over mixed traffic
(`tests/test_serve_soak.py` allows 10%); settled, a step at one sequence ran as fast in a probe. A pass of a
kind not traced yet runs eagerly, and is traced the TRACE_AFTER-th time it is seen.
"""

import warnings
from collections import Counter
from collections.abc import Callable

import torch
from torch import nn

from jev.kernels import ops
from jev.model.cache import LatentCache
from jev.model.mla import AttentionBatch
from jev.model.mlp import MoE

TRACE_AFTER = 2


class _CachedPass(nn.Module):
    """A model's decoder layers and final norm over a cached pass's tensors alone (what tracing takes)."""

    def __init__(self, layers: nn.ModuleList, norm: nn.Module) -> None:
        super().__init__()
        self.layers, self.norm = layers, norm

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        latent: torch.Tensor,
        index_keys: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`latent` (and `index_keys`) are the cache's first n_keys slots, written in place."""
        batch = AttentionBatch(positions, cos, sin, latent.shape[2], LatentCache.over(latent, index_keys), False)
        for layer in self.layers:
            x = layer(x, batch)
        return self.norm(x)


class StepGraphs:
    """A model's traced cached passes; `run` replays one (tracing it when due) or returns None."""

    def __init__(self, layers: nn.ModuleList, norm: nn.Module, replays: Callable[[AttentionBatch], bool]) -> None:
        self.passes = _CachedPass(layers, norm)
        self.replays = replays
        self.dense = not any(isinstance(layer.mlp, MoE) for layer in layers)
        self.graphs: dict[tuple, torch.jit.ScriptModule] = {}
        self.seen: Counter[tuple] = Counter()
        self.settled = False

    def settle(self) -> None:
        """From now on replay without the executor optimizing for new shapes (see the module's docstring)."""
        self.settled = True

    def run(self, x: torch.Tensor, batch: AttentionBatch) -> torch.Tensor | None:
        """The final-normed states of this pass through every layer, replayed; None where it runs eagerly."""
        cache = batch.cache
        if not self.dense or cache is None or batch.expanded or batch.indexer_losses is not None:
            return None
        if x.device.type != "cpu" or torch.is_grad_enabled() or torch.is_autocast_enabled("cpu"):
            return None
        layers = self.passes.layers
        selects = tuple(layer.self_attn.index_topk < batch.n_keys for layer in layers)
        if not self.replays(batch) or (any(selects) and not self._replays_selection(batch, selects)):
            return None
        key = (x.dtype, cache.index_keys is None, selects)
        inputs = (x, batch.positions, batch.cos, batch.sin, cache.latent[:, :, : batch.n_keys])
        inputs += () if cache.index_keys is None else (cache.index_keys[:, :, : batch.n_keys],)
        graph = self.graphs.get(key)
        if graph is None:
            self.seen[key] += 1
            if self.seen[key] < TRACE_AFTER:
                return None
        # A graph replays the layers' bodies, not their forward pre-hooks (the pass kind that mixed
        # weights read), so those run first, as the eager pass runs them.
        for layer in layers:
            for hook in layer._forward_pre_hooks.values():
                hook(layer, (x, batch))
        if graph is None:
            # The tracer warns of each size it turns into a Python number; those are the branches
            # this module's docstring names, which `run` checks before replaying. torch 2.13 also warns
            # that tracing is deprecated: see the module's docstring for why it is used.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
                graph = self.graphs[key] = torch.jit.trace(self.passes, inputs, check_trace=False)
        with torch.jit.optimized_execution(not self.settled):
            return graph(*inputs)

    def _replays_selection(self, batch: AttentionBatch, selects: tuple[bool, ...]) -> bool:
        """Whether a graph can replay this pass's selections: the attention reads them as masks and each
        selecting layer's indexer scores the pass's queries in one product (an attention that gathers
        keys, and scores made in chunks, take Python branches on sizes)."""
        if not ops.reads_selection_mask(batch.cache.latent[0, :, : batch.n_keys]):
            return False
        size, length = batch.positions.shape
        return all(
            layer.self_attn.indexer.scores_in_one_chunk(size, length, batch.n_keys)
            for layer, selecting in zip(self.passes.layers, selects, strict=True)
            if selecting
        )
