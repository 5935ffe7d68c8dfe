"""`DSparkDrafter`: a semi-autoregressive drafter that reads the target's hidden state (DSpark, DeepSeek 2026).

One parallel pass turns the target's final hidden state at the last committed position and the
pending token's embedding into K position-specific states, decoded through the target's own frozen
lm_head. An optional low-rank Markov head adds `B A e(x_{j-1})` to position j's state before that
lm_head, e being the target's embedding: with tied embeddings, a bigram term `e_v . B A e_u` with no
vocabulary-sized table of its own. Drafting adds that term in logit space (`(W B) A e`, W the head's
rows), so the K positions share one lm_head product and the only sequential part is an r-wide
product per position, not K network passes. A confidence head estimates each position's acceptance from
what exists before x_j is drawn (its state, x_{j-1} and q_j); the survival estimate is the running
product, passed through an isotonic map fitted on held-out acceptance outcomes. The map is
monotone, so survival stays non-increasing. A drafter may draft over a vocabulary of the frequent
tokens of its training text only, through the target's LM head rows for them
(`jev.generate.drafters.vocabulary`): a fraction of the head's cost, q zero elsewhere.

The drafter keeps no cache: all it reads is the target's state, which `generate` hands over with
`observe` after the prefill and after every verify pass. Its folder: `drafter.json` (kind "dspark"
and the training provenance), `dspark.json` (architecture, calibration numbers, vocabulary) and
`dspark.safetensors` (its own weights only; the embedding and lm_head stay the target's).
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from jev.calibration.calibrators import IsotonicCalibration
from jev.generate.accept import SamplingSettings, sample_from, warp
from jev.generate.drafters.protocol import DRAFTER_FILE, Draft
from jev.generate.drafters.vocabulary import VocabularyHead, target_head_rows
from jev.model import Model, ModelConfig
from jev.model.checkpoint import read_safetensors
from jev.model.mlp import MLP
from jev.model.norm import RMSNorm
from jev.model.weights import stored_like

CONFIG_FILE = "dspark.json"
WEIGHTS_FILE = "dspark.safetensors"


@dataclass(frozen=True)
class DSparkConfig:
    """The drafter's shape. `hidden_size` and `vocab_size` are the target's; `positions` is the most
    tokens one pass drafts (the largest `draft_len` it serves); `markov_rank` 0 means no Markov head.
    The defaults are the shipped drafter's shape (`make default-model`)."""

    hidden_size: int
    vocab_size: int
    width: int = 256
    layers: int = 1
    heads: int = 8
    positions: int = 7
    markov_rank: int = 128
    rms_norm_eps: float = 1e-6

    @classmethod
    def for_target(cls, target: ModelConfig, **shape: Any) -> "DSparkConfig":
        """A drafter for `target`: its hidden size, vocabulary and norm epsilon, and `shape` (width, ...)."""
        eps = target.rms_norm_eps
        return cls(hidden_size=target.hidden_size, vocab_size=target.vocab_size, rms_norm_eps=eps, **shape)

    def __post_init__(self) -> None:
        if self.width % self.heads:
            raise ValueError(f"width ({self.width}) must be a multiple of heads ({self.heads})")
        if min(self.width, self.layers, self.positions) < 1 or self.markov_rank < 0:
            raise ValueError(f"width, layers and positions must be positive and markov_rank >= 0: {self}")


class BlockLayer(nn.Module):
    """Pre-norm attention among the K draft positions (no mask: none of them has seen a drafted
    token), then a SwiGLU MLP."""

    def __init__(self, width: int, heads: int, eps: float) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(width, eps)
        self.attn = nn.MultiheadAttention(width, heads, bias=False, batch_first=True)
        self.mlp_norm = RMSNorm(width, eps)
        self.mlp = MLP(width, 2 * width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = self.attn_norm(x)
        x = x + self.attn(normed, normed, normed, need_weights=False)[0]
        return x + self.mlp(self.mlp_norm(x))


class DSparkHead(nn.Module):
    """The drafter's own weights: block predictor, output projection, Markov head, confidence head."""

    def __init__(self, config: DSparkConfig) -> None:
        super().__init__()
        self.config = config
        d, w, r = config.hidden_size, config.width, config.markov_rank
        self.hidden_norm = RMSNorm(d, config.rms_norm_eps)
        self.token_norm = RMSNorm(d, config.rms_norm_eps)
        self.fuse = nn.Linear(2 * d, w, bias=False)
        self.position = nn.Parameter(torch.zeros(config.positions, w))
        self.layers = nn.ModuleList(BlockLayer(w, config.heads, config.rms_norm_eps) for _ in range(config.layers))
        self.out = nn.Linear(w, d, bias=False)
        self.out_norm = RMSNorm(d, config.rms_norm_eps)
        if r:
            self.markov_in = nn.Linear(d, r, bias=False)
            self.markov_out = nn.Linear(r, d, bias=False)
        self.confidence = nn.Sequential(nn.Linear(w + r + 2, w), nn.SiLU(), nn.Linear(w, 1))

    @property
    def markov(self) -> bool:
        return self.config.markov_rank > 0

    def block(self, hidden: torch.Tensor, token_embedding: torch.Tensor) -> torch.Tensor:
        """`hidden [N, D]` (target state before the pending token), `token_embedding [N, D]` (the
        pending token's) -> position states `[N, positions, width]`, all in one pass."""
        fused = self.fuse(torch.cat((self.hidden_norm(hidden), self.token_norm(token_embedding)), dim=-1))
        x = fused.unsqueeze(1) + self.position
        for layer in self.layers:
            x = layer(x)
        return x

    def decode(self, states: torch.Tensor) -> torch.Tensor:
        """Position states `[..., width]` -> the parallel stage's outputs `[..., D]`, what the target's head reads."""
        return self.out_norm(self.out(states))

    def logits(self, outputs: torch.Tensor, previous: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        """`lm_head(outputs + B A previous)` `[..., V]`, `previous [..., D]` being x_{j-1}'s embedding;
        exactly `lm_head(outputs)` without a Markov head."""
        return lm_head(outputs + self.markov_out(self.markov_in(previous)) if self.markov else outputs)

    def acceptance_logit(self, states: torch.Tensor, previous: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """The confidence head: logit of P(x_j accepted | x_<j accepted) `[...]`.

        It reads position j's state, x_{j-1}'s embedding `previous` and q_j = softmax(logits_j) (its top
        probability and entropy), all known before x_j is drawn. Its inputs are detached: calibration training
        never moves the drafter itself.
        """
        log_q = F.log_softmax(logits.float(), dim=-1)
        spread = torch.stack((log_q.amax(-1), -(log_q.exp() * log_q).sum(-1)), dim=-1).to(states.dtype)
        parts = [states, self.markov_in(previous)] if self.markov else [states]
        return self.confidence(torch.cat([*parts, spread], dim=-1).detach()).squeeze(-1)

    def forward(
        self, hidden: torch.Tensor, previous: torch.Tensor, lm_head: nn.Module
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced: `previous [N, K, D]` embeds the token before each position (the pending
        token, then x_1..x_{K-1}) -> logits `[N, K, V]` and acceptance logits `[N, K]`."""
        states = self.block(hidden, previous[:, 0])[:, : previous.shape[1]]
        logits = self.logits(self.decode(states), previous, lm_head)
        return logits, self.acceptance_logit(states, previous, logits)


class DSparkDrafter:
    """Drafts `K <= config.positions` tokens per round from the target's hidden state, in one pass."""

    def __init__(
        self,
        head: DSparkHead,
        target: Model,
        calibration: IsotonicCalibration | None = None,
        vocab: torch.Tensor | None = None,
    ) -> None:
        config = head.config
        if (config.hidden_size, config.vocab_size) != (target.config.hidden_size, target.config.vocab_size):
            raise ValueError(
                f"the drafter reads hidden size {config.hidden_size} and vocabulary {config.vocab_size}; the target "
                f"has {target.config.hidden_size} and {target.config.vocab_size}"
            )
        self.head = head.eval()
        self.target = target
        self.calibration = calibration
        # q over the target's whole vocabulary, or over `vocab` alone (`jev.generate.drafters.vocabulary`)
        self.vocabulary = None if vocab is None else VocabularyHead(target, vocab)
        self.markov_logits = self._markov_logits(target, vocab) if head.markov else None
        self.passes = 0
        self._hidden = torch.zeros(0, config.hidden_size, dtype=target.dtype, device=target.device)

    @property
    def max_draft_len(self) -> int:
        return self.head.config.positions

    def _markov_logits(self, target: Model, vocab: torch.Tensor | None) -> nn.Module:
        """The Markov head's term in logit space, `(W B) (A e)` for the head's rows W, in the head's form.

        Why: `lm_head(o_j + B A e_{j-1}) = lm_head(o_j) + (W B) A e_{j-1}`, so every position's `lm_head(o_j)`
        is one product (the head's rows streamed once, not once a position) and each position adds an
        r-wide product: at r = 128 a fifth of the 576-wide head's bytes."""
        rows = target_head_rows(target, torch.arange(target.config.vocab_size) if vocab is None else vocab)
        weight = rows.double() @ self.head.markov_out.weight.double()
        linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device=rows.device, dtype=rows.dtype)
        linear.weight = nn.Parameter(weight.to(rows.dtype), requires_grad=False)
        return stored_like(linear, target.lm_head)

    @classmethod
    def load(cls, path: str | Path, target: Model) -> "DSparkDrafter":
        """A folder written by `save` (its matrices may be packed as Q8_0 by `jev pack`); the weights take
        the target's dtype and device."""
        path = Path(path)
        saved = json.loads((path / CONFIG_FILE).read_text())
        head = DSparkHead(DSparkConfig(**saved["config"]))
        head.load_state_dict(saved_weights(path))
        calibration, vocab = saved.get("survival_calibration"), saved.get("vocab")
        return cls(
            head.to(target.device, target.dtype),
            target,
            IsotonicCalibration.from_dict(calibration) if calibration else None,
            None if vocab is None else torch.tensor(vocab),
        )

    def save(self, path: str | Path, provenance: dict[str, Any] | None = None) -> Path:
        """Write the folder: kind + provenance, architecture + calibration, and the head's weights."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = {name: tensor.detach().contiguous().cpu() for name, tensor in self.head.state_dict().items()}
        save_file(state, path / WEIGHTS_FILE)
        saved = {
            "config": asdict(self.head.config),
            "survival_calibration": self.calibration.to_dict() if self.calibration else None,
            "vocab": None if self.vocabulary is None else self.vocabulary.vocab.tolist(),
        }
        (path / CONFIG_FILE).write_text(json.dumps(saved, indent=2) + "\n")
        (path / DRAFTER_FILE).write_text(json.dumps({"kind": "dspark", **(provenance or {})}, indent=2) + "\n")
        return path

    def start(self, prompts: list[list[int]], max_len: int) -> None:
        """Forget the previous batch; the target's state arrives with `observe`."""
        self._hidden = torch.zeros(
            len(prompts), self.head.config.hidden_size, dtype=self.target.dtype, device=self.target.device
        )

    def observe(self, states: torch.Tensor, followers: torch.Tensor, counts: torch.Tensor) -> None:
        """Keep each sequence's last state read, `states[b, counts[b] - 1]`, where `counts[b] > 0`."""
        rows = (counts > 0).to(self._hidden.device).view(-1, 1)
        last = _last_real(states, counts).to(self._hidden.device, self._hidden.dtype)
        self._hidden = torch.where(rows, last, self._hidden)

    def propose(
        self, pending: torch.Tensor, active: torch.Tensor, settings: SamplingSettings, uniforms: torch.Tensor
    ) -> Draft:
        """Draft from the last observed state of each sequence (a sequence never observed drafts from zeros)."""
        return self.draft(self._hidden, pending, settings, uniforms)

    def commit(self, tokens: torch.Tensor, counts: torch.Tensor) -> None:
        """Nothing to roll back: the state after the commit arrives with the next `observe`."""

    def keep(self, rows: torch.Tensor) -> None:
        self._hidden = self._hidden[rows.to(self._hidden.device)]

    @torch.no_grad()
    def draft(
        self, hidden: torch.Tensor, pending: torch.Tensor, settings: SamplingSettings, uniforms: torch.Tensor
    ) -> Draft:
        """`K = uniforms.shape[1]` drafts after `pending [B]`, given the target state `hidden [B, D]` before it.

        x_j is drawn with `sample_from(q_j, uniforms[:, j])`, q_j = warp(lm_head(output_j + Markov(x_{j-1})))
        with the request's settings, over the drafter's vocabulary when it has one (then its index in
        the vocabulary is drawn, and q_j is zero outside it); survival entry j is fixed before that
        draw. The K positions go through the lm_head as one product, the Markov term added to each
        in logit space (`markov_logits`). A greedy batch draws the argmaxes and returns no q (`Draft`).
        """
        k = uniforms.shape[1]
        if not 1 <= k <= self.max_draft_len:
            raise ValueError(f"this drafter drafts 1 to {self.max_draft_len} tokens per round, not {k}")
        device = self.target.device
        previous = self.target.embed(pending.to(device))
        states = self.head.block(hidden.to(device), previous)[:, :k]
        outputs = self.head.decode(states)
        lm_head = self.target.lm_head if self.vocabulary is None else self.vocabulary
        parallel = lm_head(outputs)
        self.passes += 1
        greedy = bool(settings.greedy.all())
        tokens, probs, before, logits_at = [], [], [], []
        for j in range(k):
            logits = parallel[:, j]
            if self.markov_logits is not None:
                logits = logits + self.markov_logits(self.head.markov_in(previous))
            before.append(previous)
            logits_at.append(logits)
            if greedy:  # q would be one-hot at the argmax, so the draw is the argmax: no distribution to build
                token = logits.argmax(dim=-1)
                token = token if self.vocabulary is None else self.vocabulary.vocab[token]
            else:
                q = warp(logits, settings)
                token = sample_from(q, uniforms[:, j].to(device))
                if self.vocabulary is not None:
                    token, q = self.vocabulary.vocab[token], self.vocabulary.spread(q)
                probs.append(q)
            previous = self.target.embed(token) if self.head.markov else previous
            tokens.append(token)
        drafted = torch.stack(tokens, dim=1)
        q = None if greedy else torch.stack(probs, dim=1)
        # The confidence head reads what each position knew before its draw, all positions in one call.
        acceptance = self.head.acceptance_logit(states, torch.stack(before, dim=1), torch.stack(logits_at, dim=1))
        survival = self.calibrated(torch.sigmoid(acceptance.double()).cumprod(dim=1))
        return Draft(tokens=drafted.to(pending.device), probs=q, survival=survival)

    def calibrated(self, raw: torch.Tensor) -> torch.Tensor:
        """Raw survival `[B, K]` -> calibrated; the running minimum guards monotonicity against rounding."""
        if self.calibration is None:
            return raw
        mapped = self.calibration.predict_proba(raw.detach().cpu().numpy().astype(np.float64).ravel())
        mapped = torch.as_tensor(mapped, dtype=raw.dtype).view(raw.shape).to(raw.device)
        return mapped.cummin(dim=1).values


def saved_config(path: str | Path) -> DSparkConfig:
    """The shape of the drafter a folder written by `DSparkDrafter.save` holds."""
    return DSparkConfig(**json.loads((Path(path) / CONFIG_FILE).read_text())["config"])


def saved_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The head's weights in a drafter folder, unpacked where `jev pack` stored them as Q8_0."""
    return read_safetensors(Path(path) / WEIGHTS_FILE)


def _last_real(states: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """`states [B, T, D]` -> `[B, D]`: row b's column `counts[b] - 1` (column 0 where it has none)."""
    index = (counts - 1).clamp(min=0).to(states.device).view(-1, 1, 1).expand(-1, 1, states.shape[-1])
    return states.gather(1, index)[:, 0]
