"""A drafter's vocabulary: the most frequent tokens of its training text, and the target's LM head over them.

Why: a draft position's LM head product over the target's whole vocabulary (49,152 x 576 for the
shipped target) and the softmax and draw over it cost more than the rest of a drafter's pass, for
tokens it almost never gets accepted. Over the frequent tokens alone q is zero elsewhere, and the
accept rule stays lossless: a token q never draws is still emitted through the residual
max(0, p - q).
"""

import torch
from torch import nn

from jev.model import Model
from jev.model.weights import stored_like


def check_vocabulary(vocab: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """`vocab` as increasing int64 token ids below `vocab_size`, or a ValueError saying what is wrong."""
    vocab = torch.as_tensor(vocab)
    if vocab.dim() != 1 or len(vocab) == 0 or vocab.is_floating_point() or not bool((vocab[1:] > vocab[:-1]).all()):
        raise ValueError("a drafter's vocabulary must be increasing token ids")
    if int(vocab[0]) < 0 or int(vocab[-1]) >= vocab_size:
        raise ValueError(f"the drafter's vocabulary has ids outside the target's 0..{vocab_size - 1}")
    return vocab.to(torch.int64)


def target_head_rows(target: Model, vocab: torch.Tensor) -> torch.Tensor:
    """The target's LM head rows for `vocab` `[N, D]`: its embedding's rows when tied, else the head's
    product with the identity (its weights in whatever form `jev.model.weights` stored them)."""
    if target.config.tie_word_embeddings:
        return target.backbone.embed_tokens.weight[vocab]
    with torch.no_grad():
        identity = torch.eye(target.config.hidden_size, dtype=target.dtype, device=target.device)
        return target.lm_head(identity).T[vocab]


def spread(probs: torch.Tensor, vocab: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Probabilities `[B, N]` over `vocab` -> `[B, vocab_size]`, zero outside it."""
    full = probs.new_zeros(len(probs), vocab_size)
    return full.index_copy_(1, vocab.to(full.device), probs)


class VocabularyHead(nn.Module):
    """The target's LM head restricted to `vocab`: logits `[..., N]` over those tokens only, its rows
    stored in the form the target's own head has (`jev.model.weights.stored_like`), frozen."""

    def __init__(self, target: Model, vocab: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("vocab", check_vocabulary(vocab, target.config.vocab_size).to(target.device))
        rows = target_head_rows(target, self.vocab).detach()
        linear = nn.Linear(rows.shape[1], rows.shape[0], bias=False, device=rows.device, dtype=rows.dtype)
        linear.weight = nn.Parameter(rows.clone(), requires_grad=False)
        self.product = stored_like(linear, target.lm_head)
        self.vocab_size = target.config.vocab_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.product(x)

    def spread(self, probs: torch.Tensor) -> torch.Tensor:
        """Probabilities `[B, N]` over the vocabulary -> `[B, V]` over the target's, zero outside it."""
        return spread(probs, self.vocab, self.vocab_size)
