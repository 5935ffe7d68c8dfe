"""`AutoregressiveDrafter`: a small `jev.model.Model` with the target's tokenizer drafting token by token.

It keeps its own latent cache. Each round it reads what the target committed since it last read
(at most a few tokens: a backlog) plus the pending token, then samples k tokens, feeding back all
but the last. After the target's verdict it rolls its cache back to the accepted prefix; a token
the target accepted but the drafter never fed (the k-th draft when all held, or every committed
token of a round it did not draft in) goes to the backlog and is read at the next `propose`.
"""

from pathlib import Path

import torch

from jev.generate.accept import SamplingSettings, sample_from, warp
from jev.generate.drafters.protocol import Draft
from jev.model import Model
from jev.model.weights import store_weights
from jev.ragged import concat_rows, drop_first, pad_rows


class AutoregressiveDrafter:
    """Drafts with a small causal LM. `model` must share the target's vocabulary."""

    def __init__(self, model: Model) -> None:
        self.model = model.eval()
        self.passes = 0
        self._cache = model.new_cache(0, 1)
        self._backlog = torch.zeros(0, 0, dtype=torch.int64)
        self._backlog_n = torch.zeros(0, dtype=torch.int64)
        self._drafted_k = 0
        self._base = torch.zeros(0, dtype=torch.int64)

    @classmethod
    def load(cls, path: str | Path, target: Model) -> "AutoregressiveDrafter":
        """A drafter folder (`config.json` + `model.safetensors`), e.g. `models/default/drafter`, in the
        target's dtype and on its device, its products stored as the target's are (`jev.model.weights`)
        and its passes replayed where the target's are: it runs a pass per draft, whose time is mostly
        its LM head's bytes and its small ops' calls."""
        model = Model.from_pretrained(path, dtype=target.dtype).to(target.device)
        if model.config.vocab_size != target.config.vocab_size:
            raise ValueError(
                f"{path}: the drafter's vocabulary ({model.config.vocab_size}) is not the target's "
                f"({target.config.vocab_size})"
            )
        store_weights(model, target.weights)
        if target.step_graphs is not None:
            model.replay_cached_passes()
        return cls(model)

    @torch.no_grad()
    def start(self, prompts: list[list[int]], max_len: int) -> None:
        batch = len(prompts)
        self._cache = self.model.new_cache(batch, max_len)
        self._backlog = torch.zeros(batch, 0, dtype=torch.int64)
        self._backlog_n = torch.zeros(batch, dtype=torch.int64)
        self._drafted_k = 0
        tokens, lengths = pad_rows([prompt[:-1] for prompt in prompts])
        if tokens.shape[1] > 0:  # the prompts only fill the cache: no LM head over them
            self.model.hidden_states(tokens.to(self.model.device), cache=self._cache, lengths=lengths)
            self.passes += 1
        # A batch may shrink (`keep`) before this generation's first draft.
        self._base = self._cache.lengths.clone()

    @torch.no_grad()
    def propose(
        self, pending: torch.Tensor, active: torch.Tensor, settings: SamplingSettings, uniforms: torch.Tensor
    ) -> Draft:
        """`K = uniforms.shape[1]` drafts per sequence: K drafter passes, the first over backlog + pending."""
        k = uniforms.shape[1]
        if k < 1:
            raise ValueError("propose needs at least one draft position")
        self._base = self._cache.lengths.clone()
        first, first_n = _append_column(self._backlog, self._backlog_n, pending)
        first_n = torch.where(active, first_n, torch.zeros_like(first_n))
        hidden = self.model.hidden_states(first.to(self.model.device), cache=self._cache, lengths=first_n)
        last = (first_n - 1).clamp(min=0).view(-1, 1, 1).expand(-1, 1, hidden.shape[-1]).to(hidden.device)
        logits = self.model.lm_head(hidden.gather(1, last))[:, 0]  # each row's last token alone
        self.passes += 1
        tokens, probs = [], []
        for j in range(k):
            q = warp(logits, settings)
            token = sample_from(q, uniforms[:, j])
            tokens.append(token)
            probs.append(q)
            if j < k - 1:
                logits = self.model(token.view(-1, 1), cache=self._cache, lengths=active.long())[:, 0]
                self.passes += 1
        self._drafted_k = k
        probs_t = torch.stack(probs, dim=1)
        confidence = probs_t.amax(dim=-1).to(torch.float64)
        return Draft(tokens=torch.stack(tokens, dim=1), probs=probs_t, survival=confidence.cumprod(dim=1))

    def commit(self, tokens: torch.Tensor, counts: torch.Tensor) -> None:
        """Keep the fed tokens the target accepted; queue accepted tokens not fed yet.

        After a drafted round, a sequence that moved holds its backlog, the pending token and
        `min(counts, k) - 1` drafts; only the k-th draft (all held) can be accepted but unfed.
        After a round without drafts, everything committed joins the backlog.
        """
        moved = counts > 0
        if self._drafted_k:
            kept = torch.minimum(counts, torch.full_like(counts, self._drafted_k))
            self._cache.truncate(torch.where(moved, self._base + self._backlog_n + kept, self._cache.lengths))
            old_n = torch.where(moved, torch.zeros_like(self._backlog_n), self._backlog_n)
        else:
            kept, old_n = torch.zeros_like(counts), self._backlog_n
        tail, tail_n = drop_first(tokens, counts, kept)
        self._backlog, self._backlog_n = concat_rows(self._backlog, old_n, tail, tail_n)
        self._drafted_k = 0

    def keep(self, rows: torch.Tensor) -> None:
        self._cache = self._cache.select(rows)
        self._base = self._base[rows.to(self._base.device)]
        rows = rows.cpu()
        self._backlog, self._backlog_n = self._backlog[rows], self._backlog_n[rows]


def _append_column(
    tokens: torch.Tensor, counts: torch.Tensor, column: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged append: row b gets `column[b]` after its `counts[b]` tokens."""
    return concat_rows(tokens, counts, column.view(-1, 1), torch.ones_like(counts))
