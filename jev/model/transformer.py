"""The DeepSeek-V3.2 decoder: embeddings, MLA + DSA layers with dense or MoE feed-forward, LM head."""

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from jev.model.base import BASE_FILE, BaseError, BaseReference
from jev.model.cache import LatentCache
from jev.model.checkpoint import check_weights, from_checkpoint_name, read_weights, to_checkpoint_name, write_weights
from jev.model.config import ModelConfig
from jev.model.mla import MLA, AttentionBatch
from jev.model.mlp import MLP, MoE
from jev.model.norm import RMSNorm
from jev.model.rope import RotaryEmbedding
from jev.model.step_graphs import TRACE_AFTER, StepGraphs


class DecoderLayer(nn.Module):
    """Pre-norm residual block: `x + attn(norm(x))`, then `x + mlp(norm(x))`.

    The residual stream keeps its dtype; attention and MLP compute in `batch.branch_dtype` when set."""

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = MLA(config, layer_idx)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        sparse = config.mlp_layer_types[layer_idx] == "sparse"
        self.mlp = MoE(config) if sparse else MLP(config.hidden_size, config.intermediate_size)

    def forward(self, x: torch.Tensor, batch: AttentionBatch, read: torch.Tensor | None = None) -> torch.Tensor:
        """`[B, T, D]`, or with `read [B, F]` the states at those positions alone, `[B, F, D]`."""
        branch = batch.branch_dtype or x.dtype
        attended = self.self_attn(self.input_layernorm(x).to(branch), batch, read)
        if read is not None:
            x = x[torch.arange(len(x), device=x.device).unsqueeze(1), read]
        x = x + attended
        return x + self.mlp(self.post_attention_layernorm(x).to(branch))


class Backbone(nn.Module):
    """Token embeddings through every layer to the final norm: `[B, T, D]` hidden states."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = RotaryEmbedding(config)


class Model(nn.Module):
    """A DeepSeek-V3.2 causal language model.

    `model(input_ids [B, T])` returns logits `[B, T, V]`. With `cache=`, the new tokens are appended
    to each sequence's cached past (any number per sequence; `lengths [B]` says how many of the T
    columns are real, the rest being right padding) and only their logits are returned.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.backbone = Backbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.backbone.embed_tokens.weight
        # The registry package file the carried-over weights came from (set by `from_pretrained`).
        self.base: BaseReference | None = None
        # What the large matrix products' weights are stored as (`jev.model.weights`): fp16 and bf16 are for
        # inference only.
        self.weights = "float32"
        # What the attention and MLP of a pass over fresh sequences compute in, when not the residual
        # stream's dtype (bfloat16 with bfloat16 products: `jev.model.weights`).
        self.fresh_branch_dtype: torch.dtype | None = None
        # Whether a cached pass's products keep one form whatever its row count (set with the weights'
        # form, `jev.model.weights`): only such a pass is replayed as a traced graph.
        self.replays_pass: Callable[[AttentionBatch], bool] = _every_pass
        # Cached passes replayed as traced graphs (`jev.model.step_graphs`), for inference only.
        self.step_graphs: StepGraphs | None = None

    def replay_cached_passes(self, on: bool = True) -> None:
        """From now on replay the passes that extend a cache as traced graphs (`on`), or run every pass
        eagerly. For an inference-only model: the graphs read its weights as they are now.

        The graphs a one-sequence generation replays are traced, and run through the executor's first
        runs, here (about 3 s on 2 cores for the shipped model): with a cache too short for the indexer
        to select, and with one long enough to keep indexer keys."""
        self.step_graphs = StepGraphs(self.backbone.layers, self.backbone.norm, self.replays_pass) if on else None
        if not on:
            return
        shortest_topk = min(layer.self_attn.index_topk for layer in self.backbone.layers)
        token = torch.zeros(1, 1, dtype=torch.int64, device=self.device)
        with torch.no_grad():
            for room in (TRACE_AFTER + 3, max(TRACE_AFTER + 3, shortest_topk + 1)):
                cache = self.new_cache(1, room)
                for _ in range(TRACE_AFTER + 2):
                    self.hidden_states(token, cache=cache)
        self.step_graphs.settle()

    @property
    def device(self) -> torch.device:
        return self.backbone.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the activations and the cache (fp16 weights still compute in it)."""
        return self.backbone.embed_tokens.weight.dtype

    def new_cache(self, batch_size: int, max_len: int) -> LatentCache:
        """An empty latent cache for `batch_size` sequences of up to `max_len` tokens; with indexer keys
        only when a pass over it could select (`max_len` past some layer's top-k)."""
        selects = max_len > min(layer.self_attn.index_topk for layer in self.backbone.layers)
        return LatentCache(self.config, batch_size, max_len, dtype=self.dtype, device=self.device, index_keys=selects)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        *,
        inputs_embeds: torch.Tensor | None = None,
        cache: LatentCache | None = None,
        lengths: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.lm_head(self.hidden_states(input_ids, inputs_embeds=inputs_embeds, cache=cache, lengths=lengths))

    def hidden_states(
        self,
        input_ids: torch.Tensor | None = None,
        *,
        inputs_embeds: torch.Tensor | None = None,
        cache: LatentCache | None = None,
        lengths: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The final-normed hidden states `[B, T, D]` of the new tokens (what the heads read)."""
        x = self._embed(input_ids, inputs_embeds)
        lengths = self._lengths(x, lengths)
        hidden = self.layer_states(x, lengths, cache=cache)
        if cache is not None:
            cache.advance(lengths)
        return hidden

    def layer_states(
        self,
        x: torch.Tensor,
        lengths: torch.Tensor,
        *,
        start: int = 0,
        stop: int | None = None,
        cache: LatentCache | None = None,
        indexer_losses: list[torch.Tensor] | None = None,
        frozen_layers: int = 0,
        read: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """States `x [B, T, D]` entering layer `start` through layers `start..stop-1`, final-normed
        when `stop` is the last layer.

        `read [B, F]` names the positions whose final states alone the caller reads (a decision's field
        tokens, in a cache-free inference pass through the last layer): that layer then computes only
        their rows, and the result is `[B, F, D]`.

        A pass may run in stages (the decision's field queries join at a higher layer): with `cache`,
        each stage writes its tokens at positions after the cached past, and the caller advances the
        cache once, by the last stage's lengths. With `indexer_losses` attention stays dense and
        each layer appends its indexer's KL loss (see `training_states`). Layers below
        `frozen_layers` run on detached weights.
        """
        stop = len(self.backbone.layers) if stop is None else stop
        if not 0 <= start <= stop <= len(self.backbone.layers):
            raise ValueError(f"layers {start}..{stop} are not within 0..{len(self.backbone.layers)}")
        if indexer_losses is not None and cache is not None:
            raise ValueError("training passes are cache-free")
        if read is not None and (stop == start or stop < len(self.backbone.layers)):
            raise ValueError("reading a subset of rows needs a pass through the last layer")
        if cache is None:
            positions, n_keys, expanded = self._fresh_positions(x, lengths), x.shape[1], True
        else:
            if cache.batch_size != x.shape[0]:
                raise ValueError(f"cache holds {cache.batch_size} sequences, input has {x.shape[0]}")
            positions = cache.positions_for(lengths, x.shape[1])
            n_keys, expanded = int((cache.lengths + lengths).max()), bool((cache.lengths == 0).all())
        cos, sin = self.backbone.rotary(positions, x.dtype)
        branch = self.fresh_branch_dtype if expanded and indexer_losses is None else None
        batch = AttentionBatch(positions, cos, sin, n_keys, cache, expanded, indexer_losses, branch)
        whole = start == 0 and stop == len(self.backbone.layers) and read is None and frozen_layers == 0
        replayed = self.step_graphs.run(x, batch) if whole and self.step_graphs is not None else None
        if replayed is not None:
            return replayed
        for i in range(start, stop):
            layer, reads = self.backbone.layers[i], read if i == stop - 1 else None
            if i < frozen_layers:
                detached = {name: weight.detach() for name, weight in layer.named_parameters()}
                x = torch.func.functional_call(layer, detached, (x, batch, reads))
            else:
                x = layer(x, batch, reads)
        return self.backbone.norm(x) if stop == len(self.backbone.layers) else x

    def training_states(
        self,
        input_ids: torch.Tensor | None = None,
        *,
        inputs_embeds: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
        frozen_layers: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Hidden states `[B, T, D]` under dense attention, and the indexers' mean KL loss.

        Training keeps attention dense (DeepSeek-V3.2's warm-up stage) while each layer's indexer
        learns to predict where attention goes, so the top-k selection used at inference is trained.
        The lowest `frozen_layers` layers run on detached weights: their outputs, and the gradient to
        their inputs, are unchanged, but their own weights learn nothing from this pass.
        """
        if not 0 <= frozen_layers <= len(self.backbone.layers):
            raise ValueError(f"frozen_layers must be 0..{len(self.backbone.layers)}, got {frozen_layers}")
        x = self._embed(input_ids, inputs_embeds)
        losses: list[torch.Tensor] = []
        hidden = self.layer_states(x, self._lengths(x, lengths), indexer_losses=losses, frozen_layers=frozen_layers)
        return hidden, torch.stack(losses).mean()

    def attending_every_key(self) -> AbstractContextManager["Model"]:
        """Within the block every query attends to all its causal keys, as if `index_topk` were unbounded:
        for training before the indexers have learned, and for measuring what the top-k selection costs."""
        return self.selecting(self.config.max_position_embeddings)

    @contextmanager
    def selecting(self, k: int) -> Iterator["Model"]:
        """Within the block every layer's indexer keeps `k` keys per query instead of `index_topk`."""
        layers = [layer.self_attn for layer in self.backbone.layers]
        saved = [attention.index_topk for attention in layers]
        for attention in layers:
            attention.index_topk = k
        try:
            yield self
        finally:
            for attention, topk in zip(layers, saved, strict=True):
                attention.index_topk = topk

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings `[B, T, D]`, for callers that splice their own vectors in (decision queries)."""
        return self.backbone.embed_tokens(input_ids)

    def _embed(self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None) -> torch.Tensor:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        return self.embed(input_ids) if inputs_embeds is None else inputs_embeds

    @staticmethod
    def _lengths(x: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
        if lengths is None:
            return torch.full((x.shape[0],), x.shape[1], dtype=torch.int64, device=x.device)
        return lengths.to(device=x.device, dtype=torch.int64)

    @staticmethod
    def _fresh_positions(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[1], device=x.device).expand(x.shape[0], -1)
        return torch.where(positions < lengths.unsqueeze(1), positions, -1)

    @classmethod
    def from_pretrained(cls, path: str | Path, dtype: torch.dtype = torch.float32) -> "Model":
        """Load a transformers DeepSeek-V3.2 folder (`config.json` + safetensors, sharded or not).

        A folder with `base.json` stores only what differs from its base: the rest is read from the
        installed package file it names (and from the base folder it names, if any), after checking
        that file's hash.
        """
        path = Path(path)
        config = ModelConfig.load(path)
        with torch.device("meta"):
            model = cls(config)
        found = read_weights(path, config)
        base = BaseReference.load(path)
        if base is not None:
            found = _with_base(found, base, path)
        check_weights(model.state_dict(), found, config.tie_word_embeddings)
        model = model.to_empty(device="cpu")
        model.load_state_dict(found, strict=not config.tie_word_embeddings)
        if config.tie_word_embeddings:
            model.lm_head.weight = model.backbone.embed_tokens.weight
        model.backbone.rotary = RotaryEmbedding(config)
        model.base = base
        return model.to(dtype).eval()

    def save_pretrained(self, path: str | Path, standalone: bool = False) -> None:
        """Write `config.json` + `model.safetensors` in the layout transformers loads.

        A model loaded on a base keeps it: the weights still equal to the base package's are named in
        `base.json`, not written (a weight training changed is written). A base folder is not kept:
        its path is relative to the folder loaded, so the weights it gave are written. `standalone` writes every
        weight and no `base.json`, for tools that know nothing of Jev's bases.
        """
        if self.weights != "float32":
            raise ValueError(f"a model with {self.weights} weights is for inference only; save the float one")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.config.save(path)
        state = self.state_dict()
        (path / BASE_FILE).unlink(missing_ok=True)
        if self.base is not None and not standalone:
            from_file = replace(self.base, identity={}).read()
            kept = {name for name, tensor in from_file.items() if _equal(state, name, tensor)}
            identity = {to_checkpoint_name(name): len(t) for name, t in state.items() if _is_identity(t)}
            based = kept | set(identity)
            state = {name: t for name, t in state.items() if to_checkpoint_name(name) not in based}
            tensors = {name: self.base.tensors[name] for name in sorted(kept)}
            replace(self.base, tensors=tensors, identity=dict(sorted(identity.items())), folder=None).save(path)
        write_weights(path, state, self.config.tie_word_embeddings)


def _with_base(found: dict[str, torch.Tensor], base: BaseReference, at: Path) -> dict[str, torch.Tensor]:
    named = {**base.read(), **(base.folder.read(at) if base.folder else {})}
    based = {from_checkpoint_name(name): tensor for name, tensor in named.items()}
    both = sorted(set(found) & set(based))
    if both:
        raise BaseError(f"{BASE_FILE} names weights the folder also stores: {both[:5]}")
    return {**found, **based}


def _equal(state: dict[str, torch.Tensor], checkpoint_name: str, tensor: torch.Tensor) -> bool:
    mine = state.get(from_checkpoint_name(checkpoint_name))
    return mine is not None and mine.dtype == tensor.dtype and torch.equal(mine.detach().cpu(), tensor)


def _is_identity(tensor: torch.Tensor) -> bool:
    square = tensor.dim() == 2 and tensor.shape[0] == tensor.shape[1] and tensor.is_floating_point()
    return square and torch.equal(tensor.detach().cpu(), torch.eye(len(tensor), dtype=tensor.dtype))


def _every_pass(batch: AttentionBatch) -> bool:
    return True
