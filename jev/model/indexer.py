"""The DSA lightning indexer: cheap scores that pick which past tokens each query attends to.

`I[t, s] = sum_j w[t, j] * relu(q[t, j] . k[s])` with one key per token shared by every indexer
head. DeepSeek's Hadamard rotation and FP8 quantisation are omitted: the rotation is orthogonal
(it leaves every `q . k` unchanged) and FP8 is a storage format, so in float32 the scores are the
same numbers.
"""

from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from jev.kernels import ops
from jev.model.config import ModelConfig
from jev.model.rope import rotate_half_split

# Per-head scores of a long prefill are [B, T, H_I, L]; queries are scored in chunks of at most
# this many elements so memory stays bounded while each chunk is still one large matmul.
_SCORE_BUDGET = 1 << 24


class Indexer(nn.Module):
    """Projections of the indexer; the scoring itself is `jev.kernels.ops.indexer_logits`."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.head_dim = config.index_n_heads, config.index_head_dim
        self.rope_dim = config.qk_rope_head_dim
        self.wq_b = nn.Linear(config.q_lora_rank, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(config.hidden_size, self.head_dim, bias=False)
        self.k_norm = nn.LayerNorm(self.head_dim, eps=1e-6)
        self.weights_proj = nn.Linear(config.hidden_size, self.n_heads, bias=False)
        self.scale = self.head_dim**-0.5

    def keys(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """`x [B, T, D]` -> the indexer key of each token `[B, T, d_I]`, RoPE on the first d_r dims.

        The indexer computes in its weights' dtype whatever its inputs' (its scores pick the keys)."""
        k = self.k_norm(self.wk(x.to(self.wk.weight.dtype)))
        return torch.cat((rotate_half_split(k[..., : self.rope_dim], cos, sin), k[..., self.rope_dim :]), dim=-1)

    def queries(
        self, x: torch.Tensor, q_compressed: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-head queries `[B, T, H_I, d_I]` and head weights `[B, T, H_I]` (scaled by H_I^-0.5)."""
        batch, length, _ = x.shape
        x, q_compressed = x.to(self.wk.weight.dtype), q_compressed.to(self.wk.weight.dtype)
        q = self.wq_b(q_compressed).view(batch, length, self.n_heads, self.head_dim)
        q = torch.cat((rotate_half_split(q[..., : self.rope_dim], cos, sin), q[..., self.rope_dim :]), dim=-1)
        weights = self.weights_proj(x).float() * self.n_heads**-0.5
        return q, weights

    def select(
        self,
        x: torch.Tensor,
        q_compressed: torch.Tensor,
        key_cache: torch.Tensor,
        q_positions: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        k: int,
    ) -> torch.Tensor:
        """Top-`min(k, t + 1)` causal positions per query `[B, T, k]` int32, ascending, -1 for unused:
        the selection an attention that gathers keys reads (a GPU's kernel, or past
        `ops.FUSED_SPARSE_MAX_KEYS` keys).

        The indexer receives no gradient from the language-model loss (selection is discrete and
        DeepSeek detaches the indexer's input), so scoring runs without autograd.
        """
        with torch.no_grad():
            q, weights = self.queries(x, q_compressed, cos, sin)
            return self._in_chunks(q, weights, key_cache, q_positions, partial(ops.select_topk, k=k))

    def select_mask(
        self,
        x: torch.Tensor,
        q_compressed: torch.Tensor,
        key_cache: torch.Tensor,
        q_positions: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        k: int,
        fresh: bool = False,
    ) -> torch.Tensor:
        """`select`'s keys as a mask `[B, T, L]`, for an attention that reads one: no order to make.

        In a `fresh` pass longer than k the first k queries see at most k keys, so they select all
        they see unranked (what ranking them would give) and only the later ones are scored. A
        cached pass ranks every query: it has few, and nothing in it then branches on their
        positions, so it replays as a traced graph (`jev.model.step_graphs`).
        """
        pick = partial(ops.top_key_mask, k=k)
        with torch.no_grad():
            ranked = (q_positions >= k).any(0).nonzero().squeeze(1) if fresh else None
            if ranked is None or len(ranked) == x.shape[1]:
                q, weights = self.queries(x, q_compressed, cos, sin)
                return self._in_chunks(q, weights, key_cache, q_positions, pick)
            selected = ops.causal_key_mask(q_positions, key_cache.shape[1])
            x, q_compressed, q_positions = x[:, ranked], q_compressed[:, ranked], q_positions[:, ranked]
            q, weights = self.queries(x, q_compressed, cos[:, ranked], sin[:, ranked])
            selected[:, ranked] = self._in_chunks(q, weights, key_cache, q_positions, pick)
            return selected

    def scores_in_one_chunk(self, rows: int, queries: int, keys: int) -> bool:
        """Whether the scores of `queries` per row over `keys` are made in one product (see `_in_chunks`)."""
        return queries <= self._chunk(rows, keys)

    def _chunk(self, rows: int, keys: int) -> int:
        """How many queries per row are scored in one product: the per-head scores stay in budget."""
        return max(1, _SCORE_BUDGET // (self.n_heads * keys * rows))

    def _in_chunks(
        self,
        q: torch.Tensor,
        weights: torch.Tensor,
        key_cache: torch.Tensor,
        q_positions: torch.Tensor,
        pick: Callable[[torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """`pick` applied to the queries' scores, a chunk of queries at a time, joined along them. Scores
        that fit one chunk are made whole, unsliced: a traced pass then replays at any number of queries
        that fits one."""
        size, length = q.shape[:2]
        chunk = self._chunk(size, key_cache.shape[1])
        if length <= chunk:
            return pick(ops.indexer_logits(q, weights, key_cache, q_positions, self.scale))
        return torch.cat([
            pick(ops.indexer_logits(q[:, rows], weights[:, rows], key_cache, q_positions[:, rows], self.scale))
            for rows in (slice(start, start + chunk) for start in range(0, length, chunk))
        ], dim=1)
