"""Multi-head Latent Attention with the DSA indexer: one set of weights, two forms.

Expanded form (prefill and training with no past tokens): per-head keys and values are built from
the latent with `kv_b_proj`, as a plain multi-head attention of head size `qk_nope + qk_rope`.

Absorbed form (decode, and every sparse step): W_UK is folded into the query and W_UV into the
output, so attention runs directly over the cached latents `[c ‖ k_rope]` as a single shared KV
head and past keys/values are never rebuilt. The softmax scale is `(qk_nope + qk_rope)^-0.5`
(times YaRN's mscale^2) in both forms.

When the indexer's `index_topk` is smaller than the number of visible keys, each query attends
only to its top-k positions of the latent cache (`jev.kernels.ops.sparse_mla_attention`); a
prefill of at most DENSE_PREFILL_MAX_KEYS keys computes the same attention in the expanded form,
masked to the selection.
"""

from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F
from torch import nn

from jev.kernels import ops
from jev.model.cache import LatentCache
from jev.model.config import ModelConfig
from jev.model.indexer import Indexer
from jev.model.norm import RMSNorm
from jev.model.precision import amx_bfloat16
from jev.model.rope import rotate_by, rotation, softmax_scale

# A prefill (no past tokens) up to this many keys runs its sparse attention as dense attention
# masked to the indexer's selection: the same softmax over the same keys, but batched matmuls
# instead of gathering `[B, T, top-k, d_c + d_r]` latents, which costs more below a few thousand.
DENSE_PREFILL_MAX_KEYS = 2048


@dataclass
class AttentionBatch:
    """What every layer of one forward pass shares.

    positions: `[B, T]` absolute position of each new token, -1 for padding.
    cos, sin: RoPE tables `[B, T, d_r / 2]` for those positions.
    n_keys: how many key slots the pass can see (the longest sequence after appending).
    cache: the latent cache written and read by this pass, or None for a cache-free pass.
    expanded: no sequence has past tokens, so attention stays within the new tokens.
    indexer_losses: set in training (DSA's dense warm-up): attention stays dense and each layer
        appends the KL divergence of its indexer's distribution from the head-summed attention.
    branch_dtype: what each layer's attention and MLP compute in, when not the residual stream's
        dtype (a fresh pass over bfloat16 weights).
    """

    positions: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor
    n_keys: int
    cache: LatentCache | None
    expanded: bool
    indexer_losses: list[torch.Tensor] | None = None
    branch_dtype: torch.dtype | None = None

    @cached_property
    def turn(self) -> torch.Tensor:
        """The RoPE turn of `cos, sin` (`jev.model.rope.rotation`), made once for every layer."""
        return rotation(self.cos, self.sin)


class MLA(nn.Module):
    """One attention layer. `forward(x [B, T, D], batch) -> [B, T, D]`."""

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.n_heads = config.num_attention_heads
        self.d_nope, self.d_rope, self.d_v = config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim
        self.d_latent = config.kv_lora_rank
        self.index_topk = config.index_topk
        self.scale = softmax_scale(config)
        self.q_a_proj = nn.Linear(config.hidden_size, config.q_lora_rank, bias=False)
        self.q_a_layernorm = RMSNorm(config.q_lora_rank)
        self.q_b_proj = nn.Linear(config.q_lora_rank, self.n_heads * config.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(config.hidden_size, self.d_latent + self.d_rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.d_latent)
        self.kv_b_proj = nn.Linear(self.d_latent, self.n_heads * (self.d_nope + self.d_v), bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.d_v, config.hidden_size, bias=False)
        self.indexer = Indexer(config)

    def forward(self, x: torch.Tensor, batch: AttentionBatch, read: torch.Tensor | None = None) -> torch.Tensor:
        """`[B, T, D]`; with `read [B, F]`, the outputs at those positions alone, `[B, F, D]` (`attend_from`)."""
        if read is not None:
            return self.attend_from(x, batch, read)
        size, length, _ = x.shape
        q_compressed, q_nope, q_rope = self._queries(x)
        latent, k_rope = self.kv_a_proj_with_mqa(x).split([self.d_latent, self.d_rope], dim=-1)
        # The queries' and the shared key's RoPE parts turn together, in float32 (one call instead of
        # two: a decode step is mostly small ops), and return in their projections' dtype.
        turned = rotate_by(torch.cat((q_rope, k_rope.unsqueeze(2)), dim=2), batch.turn)
        q_rope, k_rope = turned[:, :, : self.n_heads].to(q_nope.dtype), turned[:, :, self.n_heads].to(latent.dtype)
        kv = torch.cat((self.kv_a_layernorm(latent), k_rope), dim=-1)
        selecting = batch.indexer_losses is None and self.index_topk < batch.n_keys
        # The indexer keys are read only by a selection, or by later passes over a cache that keeps them.
        keeps_keys = batch.cache is not None and batch.cache.index_keys is not None
        index_key = self.indexer.keys(x, batch.cos, batch.sin) if selecting or keeps_keys else None

        if batch.cache is not None:
            batch.cache.write(self.layer_idx, batch.positions, kv, index_key)
            kv, index_key = batch.cache.view(self.layer_idx, batch.n_keys)
            if selecting and index_key is None:
                raise ValueError(
                    f"layer {self.layer_idx} selects {self.index_topk} of {batch.n_keys} keys, but the cache was "
                    f"made for at most {batch.cache.max_len} without indexer keys: make the cache under this top-k"
                )

        if batch.indexer_losses is not None:
            out = self.dense_training_attention(x, q_compressed, q_nope, q_rope, kv, batch)
        elif selecting:
            selection = (x, q_compressed, index_key, batch.positions, batch.cos, batch.sin, self.index_topk)
            if batch.expanded and batch.n_keys <= DENSE_PREFILL_MAX_KEYS:
                visible = self.indexer.select_mask(*selection, fresh=True)
                out = self.expanded_attention(q_nope, q_rope, kv, batch.positions, visible)
            else:
                q_nope, q_rope = q_nope.to(kv.dtype), q_rope.to(kv.dtype)
                chosen = self._select(kv, *selection)
                out_latent = ops.sparse_mla_attention(self.absorb_query(q_nope), q_rope, kv, chosen, self.scale)
                out = self.expand_output(out_latent)
        elif batch.expanded:
            out = self.expanded_attention(q_nope, q_rope, kv, batch.positions)
        else:
            out_latent = ops.mla_attention(self.absorb_query(q_nope), q_rope, kv, batch.positions, self.scale)
            out = self.expand_output(out_latent)
        return self.o_proj(out.reshape(size, length, self.n_heads * self.d_v))

    def attend_from(self, x: torch.Tensor, batch: AttentionBatch, read: torch.Tensor) -> torch.Tensor:
        """The outputs `[B, F, D]` of the queries at positions `read [B, F]` alone, over every token's keys:
        a cache-free inference pass's last layer, whose other rows nobody reads.

        Every token still gives its key; only the read rows are queried, in the absorbed form (a
        decode step's, over the pass's own latents), so the layer's query, output and MLP products
        shrink from T rows to F."""
        if batch.cache is not None or batch.indexer_losses is not None:
            raise ValueError("only a cache-free inference pass reads a subset of its rows")
        size, n_read = read.shape
        rows = torch.arange(size, device=x.device).unsqueeze(1)
        queried = x[rows, read]
        q_compressed, q_nope, q_rope = self._queries(queried)
        q_rope = rotate_by(q_rope, batch.turn[rows, read]).to(q_nope.dtype)
        latent, k_rope = self.kv_a_proj_with_mqa(x).split([self.d_latent, self.d_rope], dim=-1)
        k_rope = rotate_by(k_rope, batch.turn).to(latent.dtype)
        kv = torch.cat((self.kv_a_layernorm(latent), k_rope), dim=-1)
        q_latent = self.absorb_query(q_nope)
        if self.index_topk < batch.n_keys:
            cos, sin = batch.cos[rows, read], batch.sin[rows, read]
            index_key = self.indexer.keys(x, batch.cos, batch.sin)
            chosen = self._select(kv, queried, q_compressed, index_key, read, cos, sin, self.index_topk)
            out_latent = ops.sparse_mla_attention(q_latent, q_rope, kv, chosen, self.scale)
        else:
            out_latent = ops.mla_attention(q_latent, q_rope, kv, read, self.scale)
        return self.o_proj(self.expand_output(out_latent).reshape(size, n_read, self.n_heads * self.d_v))

    def _select(self, kv: torch.Tensor, *selection) -> torch.Tensor:
        """The indexer's selection over `kv`, every query ranked, in the form `ops.sparse_mla_attention`
        reads there: a mask where it reads one (no order to make), else ascending indices."""
        if ops.reads_selection_mask(kv):
            return self.indexer.select_mask(*selection)
        return self.indexer.select(*selection)

    def _queries(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The compressed query `[B, T, q_lora_rank]` (the indexer's input too) and its heads' no-RoPE and
        (unturned) RoPE parts, `[B, T, H, d_nope]` and `[B, T, H, d_rope]`."""
        q_compressed = self.q_a_layernorm(self.q_a_proj(x))
        q = self.q_b_proj(q_compressed).view(*x.shape[:2], self.n_heads, self.d_nope + self.d_rope)
        q_nope, q_rope = q.split([self.d_nope, self.d_rope], dim=-1)
        return q_compressed, q_nope, q_rope

    def _up_projection(self) -> tuple[torch.Tensor, torch.Tensor]:
        """W_UK `[H, d_nope, d_c]` and W_UV `[H, d_v, d_c]`: the rows of `kv_b_proj` per head."""
        weight = self.kv_b_proj.weight.view(self.n_heads, self.d_nope + self.d_v, self.d_latent)
        return weight[:, : self.d_nope], weight[:, self.d_nope :]

    def absorb_query(self, q_nope: torch.Tensor) -> torch.Tensor:
        """`q_nope [B, T, H, d_nope]` -> `W_UK^T q_nope [B, T, H, d_c]`: a query against raw latents."""
        return _per_head(q_nope, self._up_projection()[0])

    def expand_output(self, out_latent: torch.Tensor) -> torch.Tensor:
        """`[B, T, H, d_c]` -> `W_UV o [B, T, H, d_v]`: attention over latents, projected to values."""
        return _per_head(out_latent, self._up_projection()[1].transpose(1, 2))

    def expanded_attention(
        self,
        q_nope: torch.Tensor,
        q_rope: torch.Tensor,
        kv: torch.Tensor,
        positions: torch.Tensor,
        visible: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attention among the new tokens with per-head K/V built from the latents: causal, or over
        the keys `visible [B, T, T]` marks (the indexer's selection)."""
        size, length = positions.shape
        kv = kv.to(q_nope.dtype)  # a cache's latents, read back in a bfloat16 branch
        latent, k_rope = kv[..., : self.d_latent], kv[..., self.d_latent :]
        up = F.linear(latent, self.kv_b_proj.weight.to(latent.dtype))
        k_nope, value = up.view(size, length, self.n_heads, -1).split([self.d_nope, self.d_v], -1)
        # Heads first, `[B, H, T, d]`: the concatenations write that layout directly.
        query = torch.cat((q_nope.transpose(1, 2), q_rope.transpose(1, 2)), dim=-1)
        key = torch.cat((k_nope.transpose(1, 2), k_rope.unsqueeze(1).expand(-1, self.n_heads, -1, -1)), dim=-1)
        value = value.transpose(1, 2)
        # Fresh sequences are right-padded from position 0, so plain causal attention is exact for
        # every real query; padding queries' outputs are never read.
        if visible is None:
            attend = causal_attention_bfloat16 if query.dtype == torch.bfloat16 else fused_causal_attention
            return attend(query, key, value, self.scale).transpose(1, 2)
        visible[..., 0] |= ~visible.any(-1)  # padding queries read key 0 rather than produce NaN
        # SDPA's fused CPU kernel needs values as wide as the keys (`fused_causal_attention`).
        padded = F.pad(value, (0, query.shape[-1] - self.d_v))
        out = F.scaled_dot_product_attention(query, key, padded, attn_mask=visible.unsqueeze(1), scale=self.scale)
        return out.transpose(1, 2)[..., : self.d_v]

    def dense_training_attention(
        self,
        x: torch.Tensor,
        q_compressed: torch.Tensor,
        q_nope: torch.Tensor,
        q_rope: torch.Tensor,
        kv: torch.Tensor,
        batch: AttentionBatch,
    ) -> torch.Tensor:
        """Dense expanded attention with explicit probabilities, which also train the indexer.

        The indexer's target is the attention distribution summed over heads and renormalised
        (DeepSeek-V3.2's dense warm-up). Its inputs are detached, so the KL term trains only the
        indexer and the language-model loss never reaches it.
        """
        size, length = batch.positions.shape
        latent, k_rope = kv[..., : self.d_latent], kv[..., self.d_latent :]
        k_nope, value = self.kv_b_proj(latent).view(size, length, self.n_heads, -1).split([self.d_nope, self.d_v], -1)
        scores = torch.einsum("bthn,bshn->bhts", q_nope, k_nope) + torch.einsum("bthr,bsr->bhts", q_rope, k_rope)
        visible = ops.causal_key_mask(batch.positions, length)
        visible[..., 0] |= ~visible.any(-1)
        probs = torch.softmax((scores * self.scale).masked_fill(~visible.unsqueeze(1), float("-inf")), dim=-1)
        target = probs.detach().sum(1)
        target = target / target.sum(-1, keepdim=True)
        q_index, weights = self.indexer.queries(x.detach(), q_compressed.detach(), batch.cos, batch.sin)
        keys = self.indexer.keys(x.detach(), batch.cos, batch.sin)
        index_scores = ops.indexer_logits(q_index, weights, keys, batch.positions.clamp(min=0), self.indexer.scale)
        log_q = torch.log_softmax(index_scores, dim=-1).masked_fill(~visible, 0.0)
        kl = (target * (target.clamp(min=1e-12).log() - log_q)).sum(-1)
        real = batch.positions >= 0
        batch.indexer_losses.append((kl * real).sum() / real.sum().clamp(min=1))
        return torch.einsum("bhts,bshv->bthv", probs, value)


# A chunk holds the scores of at most this many (query, key) pairs: a few megabytes, which stay in
# the cores' caches; a batch of 32 mails' scores at once (about 40 MB) ran slower than SDPA's kernel.
SCORES_PER_CHUNK = 700_000


def fused_causal_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal attention through SDPA's fused CPU kernel: `[B, H, T, d]` queries and keys, `[B, H, T, d_v]`
    values -> `[B, H, T, d_v]`.

    The kernel fuses only values as wide as the keys (MLA's are 64 wide, its keys 96); without it,
    it falls back to its unfused path at about twice the time. So the values are padded with zeros,
    which add nothing to the output. It computes the scores in float32 whatever the inputs' dtype,
    faster forward and backward on a CPU than with an explicit mask."""
    padded = F.pad(value, (0, query.shape[-1] - value.shape[-1]))
    return F.scaled_dot_product_attention(query, key, padded, is_causal=True, scale=scale)[..., : value.shape[-1]]


def explicit_causal_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float
) -> torch.Tensor:
    """Causal attention of fresh sequences in bfloat16 as batched products: `[B, H, T, d]` queries and
    keys, `[B, H, T, d_v]` values -> `[B, H, T, d_v]`.

    Why: where the CPU has no AMX, SDPA's fused kernel multiplies bfloat16 without oneDNN's brgemm,
    and at a decision's few hundred tokens it runs these 96-wide heads (values padded to 96) slower
    than three batched products and a softmax (`benchmarks/prefill_attention.py`). A bfloat16
    product rounds its output, and an attention sink's score reaches 80 in the shipped model, so
    the scores are taken relative to each row's largest: a first product finds it, and the second
    subtracts it inside its float32 sums (one more column, the negated peak against ones), so the
    scores that carry the softmax come out near zero, where bfloat16 is fine. That keeps the error
    at SDPA's (float32 scores); rounding the plain scores doubled to tripled it. Sequences go a few
    at a time (SCORES_PER_CHUNK).
    """
    size, heads, length, _ = query.shape
    mask = torch.full((length, length), float("-inf"), dtype=query.dtype, device=query.device).triu(1)
    per_chunk = max(1, SCORES_PER_CHUNK // (heads * length * length))
    out = []
    for start in range(0, size, per_chunk):
        chunk = slice(start, start + per_chunk)
        q, k = query[chunk], key[chunk]
        peak = torch.matmul(q, k.transpose(-1, -2)).add_(mask).amax(-1, keepdim=True)
        q, k = torch.cat((q, -peak), dim=-1), torch.cat((k, torch.ones_like(k[..., :1])), dim=-1)
        scores = torch.matmul(q, k.transpose(-1, -2)).mul_(scale).add_(mask)
        out.append(torch.matmul(torch.softmax(scores, dim=-1), value[chunk]))
    return out[0] if len(out) == 1 else torch.cat(out)


# The causal attention of a fresh bfloat16 pass (a decision, a prompt): SDPA's fused kernel where
# it multiplies through AMX tiles (a fifth to two fifths of the explicit form's time at a decision's
# 192 tokens on an AMX Xeon, `benchmarks/prefill_attention.py`), the explicit form elsewhere.
causal_attention_bfloat16 = fused_causal_attention if amx_bfloat16() else explicit_causal_attention


def _per_head(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`x [B, T, H, n] @ weight [H, n, m]` per head -> `[B, T, H, m]`, as one batched product over the
    heads with every token a row. (`torch.matmul` on `[B, H, T, n]` would broadcast the weight to each
    sequence and copy it: at 16 sequences, in a one-off probe, that copy cost a decode step about 17 ms.)"""
    size, length, heads, _ = x.shape
    rows = x.reshape(size * length, heads, -1).transpose(0, 1)
    return torch.bmm(rows, weight.to(x.dtype)).transpose(0, 1).reshape(size, length, heads, -1)
