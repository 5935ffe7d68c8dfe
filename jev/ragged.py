"""Ragged batches: rows of different lengths as one right-padded tensor and a lengths vector.

Every batched pass in Jev (decisions, prefill, verification, drafting, constrained decoding) reads
its rows this way: row b's tokens are `tokens[b, :lengths[b]]`, and what lies past them is zero
and never read.
"""

import itertools
from collections.abc import Sequence

import torch
from torch import nn


def pad_rows(
    rows: Sequence[Sequence[int]], device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id lists -> `[B, longest]` int64, zeros past each row's end, and the lengths `[B]`."""
    lengths = torch.tensor([len(row) for row in rows], dtype=torch.int64)
    width = int(lengths.max()) if len(rows) else 0
    tokens = torch.zeros(len(rows), width, dtype=torch.int64)
    tokens[torch.arange(width) < lengths.view(-1, 1)] = torch.tensor(
        list(itertools.chain.from_iterable(rows)), dtype=torch.int64
    )
    return tokens.to(device), lengths.to(device)


def pad_states(states: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per-row states `[n_b, D]` as one right-padded batch `[B, longest, D]`."""
    return nn.utils.rnn.pad_sequence(list(states), batch_first=True)


def rows_of(tokens: torch.Tensor, lengths: torch.Tensor) -> list[list[int]]:
    """`tokens[b, :lengths[b]]` as lists, converted in one call."""
    rows = tokens[:, : int(lengths.max()) if lengths.numel() else 0].tolist()
    for row, n in zip(rows, lengths.tolist(), strict=True):
        del row[n:]
    return rows


def concat_rows(
    a: torch.Tensor, a_n: torch.Tensor, b: torch.Tensor, b_n: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Row i is `a[i, :a_n[i]] ++ b[i, :b_n[i]]`, right-padded with zeros: `[B, max(a_n + b_n), ...]`
    and lengths. Rows may be token ids `[B, T]` or vectors `[B, T, D]` (both of one dtype)."""
    total = a_n + b_n
    width = int(total.max()) if total.numel() else 0
    columns = torch.arange(width).view(1, -1)
    trailing = a.shape[2:]

    def take(rows: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        if not rows.shape[1]:
            return rows.new_zeros(len(index), width, *trailing)
        index = index.expand(len(index), width).view(len(index), width, *(1,) * len(trailing))
        return rows.gather(1, index.expand(-1, -1, *trailing))

    a_part = take(a, columns.clamp(max=max(a.shape[1] - 1, 0)).expand(len(a_n), -1))
    b_part = take(b, (columns - a_n.view(-1, 1)).clamp(min=0, max=max(b.shape[1] - 1, 0)))
    shape = (len(total), width, *(1,) * len(trailing))
    out = torch.where((columns < a_n.view(-1, 1)).view(shape), a_part, b_part)
    return torch.where((columns < total.view(-1, 1)).view(shape), out, torch.zeros_like(out)), total


def drop_first(tokens: torch.Tensor, lengths: torch.Tensor, drop: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row i becomes `tokens[i, drop[i]:lengths[i]]`."""
    width = tokens.shape[1]
    index = (torch.arange(width).view(1, -1) + drop.view(-1, 1)).clamp(max=max(width - 1, 0))
    return tokens.gather(1, index) if width else tokens, (lengths - drop).clamp(min=0)
