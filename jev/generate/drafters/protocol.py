"""Drafters: cheap models that propose the next few tokens for the target to verify.

A drafter keeps its own state per sequence (for an autoregressive drafter, its own latent cache)
and follows the target: `start` with the prompts, then each round `propose` k tokens from the
pending token, and `commit` what the target actually accepted so it can roll back the rest; `keep`
drops the sequences that have finished. A drafter that reads the target's hidden states (DSpark,
EAGLE) also gets `observe`d after the prefill and after every verify pass, with the states of
every position the target read.

Both kinds import these from here; the package's `load_drafter` picks the kind a folder holds.
"""

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from jev.generate.accept import SamplingSettings

DRAFTER_FILE = "drafter.json"


@dataclass(frozen=True)
class Draft:
    """One round's proposals for a batch.

    tokens: `[B, K]` drafted tokens. probs: `[B, K, V]` the distribution each was sampled from (q), or
        None from a drafter that drew a greedy batch's argmaxes: every row greedy, the verdict reads
        the target's argmaxes alone (`greedy_verdict`), and a one-hot q of 64 sequences by 7 drafts
        over the vocabulary took 17 ms to build (2026-12-07, the Xeon).
    survival: `[B, K]` estimated P(drafts 1..j all accepted), non-increasing in j. Entry j is
        computed before x_j is drawn (from x_<j only), so a verify-length policy that reads it
        never looks at the token it decides about (DSpark App. A).
    """

    tokens: torch.Tensor
    probs: torch.Tensor | None
    survival: torch.Tensor

    @classmethod
    def none(cls, batch: int, vocab_size: int, dtype: torch.dtype) -> "Draft":
        """A round without drafts (a plain decoding step): zero tokens per sequence."""
        return cls(
            tokens=torch.zeros(batch, 0, dtype=torch.int64),
            probs=torch.zeros(batch, 0, vocab_size, dtype=dtype),
            survival=torch.zeros(batch, 0, dtype=torch.float64),
        )


class Drafter(Protocol):
    """What `jev.generate.loop` needs from a drafter. `passes` counts the drafter's own forward passes."""

    passes: int

    def start(self, prompts: list[list[int]], max_len: int) -> None:
        """Read every prompt but its last token (the first pending token); room for `max_len` tokens."""

    def propose(
        self, pending: torch.Tensor, active: torch.Tensor, settings: SamplingSettings, uniforms: torch.Tensor
    ) -> Draft:
        """Draft `K = uniforms.shape[1]` tokens after `pending [B]` for the `active [B]` sequences.

        Drafted tokens are drawn with `sample_from(q, uniforms[:, j])` where q is the drafter's
        distribution warped with the request's own settings.
        """

    def commit(self, tokens: torch.Tensor, counts: torch.Tensor) -> None:
        """The target committed `tokens[b, :counts[b]]` (the pending token, then the accepted drafts)."""

    def keep(self, rows: torch.Tensor) -> None:
        """Go on with these sequences alone, in this order (`rows`: their indices in the batch so far):
        the others have finished. Called after a `commit`."""


@runtime_checkable
class ReadsTargetStates(Drafter, Protocol):
    """A drafter that drafts from the target's hidden states; `generate` never lets it draft for a
    sequence it has not yet been shown a state for (such a round is a plain decoding step)."""

    def observe(self, states: torch.Tensor, followers: torch.Tensor, counts: torch.Tensor) -> None:
        """The target read `counts[b]` new positions of sequence b into its cache (0: none). `states
        [B, T, D]`: its final hidden states there, in the first `counts[b]` columns; `followers [B, T]`:
        the token after each of those positions (the last one real is the new pending token)."""
