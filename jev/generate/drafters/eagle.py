"""`EagleDrafter`: drafts token by token from the target's own features (EAGLE, Li et al. 2024).

One DeepSeek-V3.2 decoder layer reads a sequence of entries, entry t being the target's final
hidden state at position t and the token at t + 1, fused by one linear map of the two
concatenated; its output predicts the target's state at t + 1, which the target's own LM head
turns into the next token's distribution. Drafting feeds its predictions back: draft j + 1 reads
the entry (predicted state, draft j). Unlike DSpark's block drafter it attends over every entry it
has read, through its own latent cache, and each draft sees the one before it. The target's states
come with `observe`, after the prefill and after every verify pass; the drafted entries are rolled
back at `commit` and the target's real states take their place.

q is zero outside `vocab`, the most frequent tokens of the training text, so a draft step's head
product is N x D instead of V x D. The accept rule allows it: a token q never draws is still
emitted through the residual. The layer's LM head is the target's rows for `vocab` (tied to its
embedding), so the folder stores only the layer, the fuse map and the vocabulary's ids: `drafter.json`
(kind "eagle" and the training provenance), `eagle.json` (the layer's config and `vocab`) and
`eagle.safetensors`.
"""

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from jev.generate.accept import SamplingSettings, sample_from, warp
from jev.generate.drafters.protocol import DRAFTER_FILE, Draft
from jev.generate.drafters.vocabulary import check_vocabulary, spread, target_head_rows
from jev.model import Model, ModelConfig
from jev.model.checkpoint import read_safetensors
from jev.model.weights import store_weights
from jev.ragged import concat_rows

CONFIG_FILE = "eagle.json"
WEIGHTS_FILE = "eagle.safetensors"
# Weights the folder does not store: the layer's tied embedding and LM head are the target's rows.
_TARGET_ROWS = ("layer.backbone.embed_tokens.weight", "layer.lm_head.weight")


def eagle_config(target: ModelConfig, vocab_size: int) -> ModelConfig:
    """One dense decoder layer of the target's width and attention shape, over `vocab_size` tokens,
    attending to every key (its indexer's top-k covers the whole context)."""
    return replace(
        target,
        vocab_size=vocab_size,
        num_hidden_layers=1,
        first_k_dense_replace=1,
        n_routed_experts=0,
        mlp_layer_types=[],
        tie_word_embeddings=True,
        index_topk=target.max_position_embeddings,
    )


class EagleNet(nn.Module):
    """The drafter's layer and fuse map, with its vocabulary's ids; `attach` gives it the target's head rows."""

    def __init__(self, config: ModelConfig, vocab: torch.Tensor) -> None:
        super().__init__()
        if vocab.dim() != 1 or len(vocab) != config.vocab_size or not bool((vocab[1:] > vocab[:-1]).all()):
            raise ValueError(f"vocab must be {config.vocab_size} increasing token ids")
        self.layer = Model(config)
        self.fuse = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=False)
        self.register_buffer("vocab", vocab.to(torch.int64), persistent=False)

    def attach(self, target: Model) -> "EagleNet":
        """Tie the layer's embedding and LM head to the target's rows for `vocab` (frozen)."""
        rows = target_head_rows(target, self.vocab.to(target.device)).detach()
        self.layer.backbone.embed_tokens.weight = nn.Parameter(rows.to(self.fuse.weight.dtype), requires_grad=False)
        self.layer.lm_head.weight = self.layer.backbone.embed_tokens.weight
        return self

    def inputs(self, features: torch.Tensor, token_embeddings: torch.Tensor) -> torch.Tensor:
        """Entries `[..., D]` from target (or predicted) states and the next tokens' embeddings."""
        return self.fuse(torch.cat((features, token_embeddings.to(features.dtype)), dim=-1))

    def state_dict_to_save(self) -> dict[str, torch.Tensor]:
        return {
            name: tensor.detach().contiguous().cpu()
            for name, tensor in self.state_dict().items()
            if name not in _TARGET_ROWS
        }


class EagleDrafter:
    """Drafts `K` tokens per round, one layer pass each, from the target's states and its own predictions."""

    def __init__(self, net: EagleNet, target: Model) -> None:
        config = net.layer.config
        if config.hidden_size != target.config.hidden_size:
            raise ValueError(
                f"the drafter reads hidden size {config.hidden_size}; the target has {target.config.hidden_size}"
            )
        check_vocabulary(net.vocab, target.config.vocab_size)
        self.net = net.eval()
        self.target = target
        self.passes = 0
        self._cache = net.layer.new_cache(0, 1)
        self._base = torch.zeros(0, dtype=torch.int64)
        self._features = torch.zeros(0, 0, config.hidden_size, dtype=target.dtype, device=target.device)
        self._tokens = torch.zeros(0, 0, dtype=torch.int64)
        self._unread = torch.zeros(0, dtype=torch.int64)

    @classmethod
    def load(cls, path: str | Path, target: Model) -> "EagleDrafter":
        """A folder written by `save` (its matrices may be packed as Q8_0 by `jev pack`), in the target's dtype,
        its layer's products stored as the target's are (`jev.model.weights`): a draft step streams them."""
        path = Path(path)
        saved = json.loads((path / CONFIG_FILE).read_text())
        net = EagleNet(ModelConfig.from_dict(saved["config"]), torch.tensor(saved["vocab"]))
        missing, unexpected = net.load_state_dict(read_safetensors(path / WEIGHTS_FILE), strict=False)
        if unexpected or set(missing) - set(_TARGET_ROWS):
            raise ValueError(f"{path / WEIGHTS_FILE}: missing {missing}, unexpected {unexpected}")
        net = net.to(target.device, target.dtype).attach(target)
        store_weights(net.layer, target.weights)
        return cls(net, target)

    def save(self, path: str | Path, provenance: dict[str, Any] | None = None) -> Path:
        """Write the folder: kind + provenance, the layer's config + vocabulary, and its own weights."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        save_file(self.net.state_dict_to_save(), path / WEIGHTS_FILE)
        saved = {"config": self.net.layer.config.to_dict(), "vocab": self.net.vocab.tolist()}
        (path / CONFIG_FILE).write_text(json.dumps(saved) + "\n")
        (path / DRAFTER_FILE).write_text(json.dumps({"kind": "eagle", **(provenance or {})}, indent=2) + "\n")
        return path

    def start(self, prompts: list[list[int]], max_len: int) -> None:
        """Forget the previous batch; its entries arrive with `observe` (room for `max_len` of them)."""
        batch = len(prompts)
        self._cache = self.net.layer.new_cache(batch, max_len)
        self._base = torch.zeros(batch, dtype=torch.int64)
        self._features = self._features.new_zeros(batch, 0, self._features.shape[-1])
        self._tokens = torch.zeros(batch, 0, dtype=torch.int64)
        self._unread = torch.zeros(batch, dtype=torch.int64)

    def observe(self, states: torch.Tensor, followers: torch.Tensor, counts: torch.Tensor) -> None:
        """Queue the entries (state, following token) the target just read; the next `propose` reads them."""
        counts = counts.cpu()
        features = states.to(self._features.device, self._features.dtype)
        self._features, _ = concat_rows(self._features, self._unread, features, counts)
        self._tokens, self._unread = concat_rows(self._tokens, self._unread, followers.cpu(), counts)

    @torch.no_grad()
    def propose(
        self, pending: torch.Tensor, active: torch.Tensor, settings: SamplingSettings, uniforms: torch.Tensor
    ) -> Draft:
        """Read the queued entries, then draft `K = uniforms.shape[1]` tokens, one layer pass each.

        The last queued entry of a sequence pairs its newest state with `pending`, so the first
        pass's output there predicts the state after `pending`."""
        k = uniforms.shape[1]
        if k < 1:
            raise ValueError("propose needs at least one draft position")
        device = self.target.device
        counts = torch.where(active.cpu(), self._unread, 0)
        if bool((active.cpu() & (counts == 0)).any()):
            raise ValueError("a sequence drafts only after the target's states since its last draft were observed")
        features = self._step(self._features, self._tokens, counts)
        features = features[torch.arange(len(counts)), (counts - 1).clamp(min=0).to(device)]
        self._base = self._cache.lengths.clone()
        self._features, self._tokens = self._features[:, :0], self._tokens[:, :0]
        self._unread = torch.zeros_like(self._unread)
        tokens, probs = [], []
        for j in range(k):
            q = self._distribution(features, settings)
            token = sample_from(q, uniforms[:, j].to(device))
            tokens.append(token)
            probs.append(q)
            if j < k - 1:
                features = self._step(features.unsqueeze(1), token.view(-1, 1), active.long())[:, 0]
        probs_t = torch.stack(probs, dim=1)
        survival = probs_t.amax(dim=-1).to(torch.float64).cumprod(dim=1)
        return Draft(tokens=torch.stack(tokens, dim=1).to(pending.device), probs=probs_t, survival=survival)

    def commit(self, tokens: torch.Tensor, counts: torch.Tensor) -> None:
        """Roll the drafted entries back: the target's states for what it accepted come with `observe`."""
        self._cache.truncate(self._base)

    def keep(self, rows: torch.Tensor) -> None:
        self._cache = self._cache.select(rows)
        self._base = self._base[rows.to(self._base.device)]
        rows = rows.cpu()
        self._unread = self._unread[rows]
        self._features, self._tokens = self._features[rows.to(self._features.device)], self._tokens[rows]

    def _step(self, features: torch.Tensor, tokens: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """One layer pass appending entries `(features [B, T, D], tokens [B, T])`, `counts [B]` real per row."""
        device = self.target.device
        inputs = self.net.inputs(features.to(device), self.target.embed(tokens.to(device)))
        self.passes += 1
        return self.net.layer.hidden_states(inputs_embeds=inputs, cache=self._cache, lengths=counts.to(device))

    def _distribution(self, features: torch.Tensor, settings: SamplingSettings) -> torch.Tensor:
        """q `[B, V]`: the request's warp of the layer's head over `vocab`, zero elsewhere."""
        return spread(warp(self.net.layer.lm_head(features), settings), self.net.vocab, self.target.config.vocab_size)

