"""Drafters: cheap models that propose the next few tokens for the target to verify.

A drafter keeps its own state per sequence (for an autoregressive drafter, its own latent cache)
and follows the target: `start` with the prompts, then each round `propose` k tokens from the
pending token, and `commit` what the target actually accepted so it can roll back the rest.
"""

from dataclasses import dataclass
from typing import Protocol

import torch

from jev.engine.accept import SamplingSettings


@dataclass(frozen=True)
class Draft:
    """One round's proposals for a batch.

    tokens: `[B, K]` drafted tokens. probs: `[B, K, V]` the distribution each was sampled from (q).
    survival: `[B, K]` estimated P(drafts 1..j all accepted), non-increasing in j. Entry j is
        computed before x_j is drawn (from x_<j only), so a verify-length policy that reads it
        never looks at the token it decides about (DSpark App. A).
    """

    tokens: torch.Tensor
    probs: torch.Tensor
    survival: torch.Tensor


class Drafter(Protocol):
    """What `jev.engine.generate` needs from a drafter."""

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
