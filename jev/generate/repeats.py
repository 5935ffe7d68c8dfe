"""The repetition guard: no n-gram of generated tokens is written twice.

A small model decoding greedily falls into loops (`[ILUG] [ILUG] [ILUG]`). The guard takes from
the target's distribution every token that would complete an n-gram the generated text already
holds. It is a function of the text before each position only, so plain and speculative decoding
apply the same guard to the same distribution, and the accept rule stays lossless with respect to
it: a drafted token the guard bans has target probability 0 and is rejected.
"""

import torch


def banned_tokens(history: list[int], n: int) -> set[int]:
    """The tokens that would complete an n-gram already in `history` (n = 1: every token in it)."""
    if len(history) < n - 1:
        return set()
    tail = history[len(history) - n + 1 :] if n > 1 else []
    return {history[i + n - 1] for i in range(len(history) - n + 1) if history[i : i + n - 1] == tail}


def repeat_mask(
    generated: torch.Tensor, counts: torch.Tensor, drafted: torch.Tensor, n: int, vocab: int
) -> torch.Tensor:
    """`[B, W + 1, V]` bool, True where the guard bans a token: at block position j, row b's text is
    its `counts[b]` generated tokens and then its first j drafted ones."""
    batch, width = drafted.shape
    mask = torch.zeros(batch, width + 1, vocab, dtype=torch.bool)
    for row in range(batch):
        text = generated[row, : int(counts[row])].tolist() + drafted[row].tolist()
        start = int(counts[row])
        for j in range(width + 1):
            banned = banned_tokens(text[: start + j], n)
            if banned:
                mask[row, j, sorted(banned)] = True
    return mask
