"""`LatentCache`: what MLA + DSA keep per past token, and nothing more.

Per layer and token: the normalised KV latent and the rotated shared rope key, stored side by side
(`kv_lora_rank + qk_rope_head_dim` numbers: the absorbed form's only key and value), plus the DSA
indexer key (`index_head_dim` numbers). Past K/V are never expanded or stored per head.

A cache no longer than the indexer's top-k can never select (every query sees at most `max_len`
keys, all of which the top-k keeps), so it keeps no indexer keys, and the passes over it compute
none: that is most decoding of short texts, where the keys cost a decode step about a tenth of its
time.
"""

import torch

from jev.model.config import ModelConfig


class CacheFullError(RuntimeError):
    """Appending would run past the cache's `max_len`."""


class LatentCache:
    """Latents `[layers, B, max_len, d_c + d_r]`, indexer keys `[layers, B, max_len, d_I]` (None when
    not `index_keys`), lengths `[B]`."""

    def __init__(
        self,
        config: ModelConfig,
        batch_size: int,
        max_len: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        index_keys: bool = True,
    ) -> None:
        layers = config.num_hidden_layers
        self.max_len = max_len
        self.latent = torch.zeros(
            layers, batch_size, max_len, config.kv_lora_rank + config.qk_rope_head_dim, dtype=dtype, device=device
        )
        self.index_keys = (
            torch.zeros(layers, batch_size, max_len, config.index_head_dim, dtype=dtype, device=device)
            if index_keys
            else None
        )
        self.lengths = torch.zeros(batch_size, dtype=torch.int64, device=device)
        self._written_positions: torch.Tensor | None = None
        self._slots: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    @property
    def batch_size(self) -> int:
        return self.lengths.shape[0]

    def positions_for(self, new_lengths: torch.Tensor, width: int) -> torch.Tensor:
        """Absolute positions `[B, width]` of the tokens about to be appended; -1 marks padding."""
        offsets = torch.arange(width, device=self.lengths.device)
        positions = self.lengths.unsqueeze(1) + offsets
        end = self.lengths + new_lengths
        if int(end.max()) > self.max_len:
            raise CacheFullError(f"appending reaches position {int(end.max())} but the cache holds {self.max_len}")
        return torch.where(offsets < new_lengths.unsqueeze(1), positions, -1)

    def write(self, layer: int, positions: torch.Tensor, latent: torch.Tensor, index_key: torch.Tensor | None) -> None:
        """Store the new tokens' `latent [B, T, d_c + d_r]` and `index_key [B, T, d_I]` (when the cache
        keeps indexer keys) at their positions."""
        if positions is not self._written_positions:
            # Every layer of a pass writes at the same positions: find the slots once per pass.
            batch, token = torch.nonzero(positions >= 0, as_tuple=True)
            self._written_positions, self._slots = positions, (batch, token, positions[batch, token])
        batch, token, slots = self._slots
        # `index_put_` rather than item assignment, which a trace records with the value's shape fixed.
        self.latent[layer].index_put_((batch, slots), latent[batch, token].to(self.latent.dtype))
        if self.index_keys is not None:
            self.index_keys[layer].index_put_((batch, slots), index_key[batch, token].to(self.index_keys.dtype))

    def advance(self, new_lengths: torch.Tensor) -> None:
        """Commit the tokens written by the last forward pass."""
        self.lengths += new_lengths

    def view(self, layer: int, n_keys: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The first `n_keys` slots of one layer: latents `[B, n_keys, d_c + d_r]` and indexer keys."""
        keys = None if self.index_keys is None else self.index_keys[layer, :, :n_keys]
        return self.latent[layer, :, :n_keys], keys

    def truncate(self, lengths: torch.Tensor | list[int]) -> None:
        """Roll sequences back to `lengths` (e.g. past rejected draft tokens); never grows one."""
        lengths = torch.as_tensor(lengths, dtype=torch.int64, device=self.lengths.device)
        if lengths.shape != self.lengths.shape:
            raise ValueError(f"truncate needs {self.batch_size} lengths, got shape {tuple(lengths.shape)}")
        if bool((lengths < 0).any()) or bool((lengths > self.lengths).any()):
            raise ValueError(f"truncate lengths {lengths.tolist()} must be within 0..{self.lengths.tolist()}")
        self.lengths = lengths.clone()

    def select(self, rows: torch.Tensor | list[int]) -> "LatentCache":
        """A new cache holding copies of these rows, in this order (a row may repeat): e.g. one copy
        per candidate continuation to score from a shared prefix."""
        index = torch.as_tensor(rows, dtype=torch.int64, device=self.lengths.device)
        keys = None if self.index_keys is None else self.index_keys[:, index]
        return LatentCache.over(self.latent[:, index], keys, self.lengths[index].clone())

    def put(self, rows: torch.Tensor, source: "LatentCache", source_rows: torch.Tensor) -> None:
        """Copy `source`'s sequences `source_rows` into this cache's `rows`, lengths included: the way
        back for a `select`ion that went on without the others."""
        self.latent[:, rows] = source.latent[:, source_rows]
        if self.index_keys is not None:
            self.index_keys[:, rows] = source.index_keys[:, source_rows]
        self.lengths[rows] = source.lengths[source_rows]

    @classmethod
    def over(
        cls, latent: torch.Tensor, index_keys: torch.Tensor | None, lengths: torch.Tensor | None = None
    ) -> "LatentCache":
        """A cache whose slots are these tensors (written in place): a row selection's copies, or a traced
        pass's inputs (`jev.model.step_graphs`). Without `lengths`, every sequence is empty."""
        cache = object.__new__(cls)
        cache.max_len = latent.shape[2]
        cache.latent, cache.index_keys = latent, index_keys
        cache.lengths = latent.new_zeros(latent.shape[1], dtype=torch.int64) if lengths is None else lengths
        cache._written_positions, cache._slots = None, None
        return cache
