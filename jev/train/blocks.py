"""Documents -> one token stream -> fixed blocks -> the batch of every step, as a pure function of the step.

Because a step's batch depends only on (seed, step), a resumed run needs no data-loader state and
every rank can find its shard of a global batch without talking to the others.
"""

import hashlib
from dataclasses import dataclass, field

import torch
from tokenizers import Tokenizer

from jev.tokenizer import BOS_ID, EOS_ID


@dataclass
class TokenBlocks:
    """Training and held-out blocks `[N, block_size + 1]`: the inputs and, shifted by one, the targets."""

    train: torch.Tensor
    held_out: torch.Tensor
    stream_tokens: int
    fingerprint: str
    _order_cache: tuple[tuple[int, int], torch.Tensor] | None = field(default=None, repr=False)

    @classmethod
    def build(
        cls,
        tokenizer: Tokenizer,
        documents: list[str],
        block_size: int,
        held_out_fraction: float,
        bos: int = BOS_ID,
        eos: int = EOS_ID,
    ) -> "TokenBlocks":
        """Encode each document, join them with `<eos>`, cut blocks, and hold out the last blocks.

        The held-out blocks come from the end of the stream, so they are text the model never trains on.
        `bos`/`eos` are the model's own (a converted model's differ from a Jev-trained one's).
        """
        stream = token_stream(tokenizer, documents, bos, eos)
        n_blocks = len(stream) // (block_size + 1)
        blocks = stream[: n_blocks * (block_size + 1)].view(n_blocks, block_size + 1)
        n_held_out = round(n_blocks * held_out_fraction) if held_out_fraction > 0 else 0
        if held_out_fraction > 0 and n_blocks >= 2:
            n_held_out = max(1, n_held_out)
        fingerprint = hashlib.sha256(stream.numpy().tobytes()).hexdigest()
        return cls(blocks[: n_blocks - n_held_out], blocks[n_blocks - n_held_out :], len(stream), fingerprint)

    def steps_per_epoch(self, batch_size: int) -> int:
        return len(self.train) // batch_size

    def position(self, step: int, batch_size: int) -> tuple[int, int]:
        """(epoch, batch index within the epoch) of `step`."""
        return divmod(step, self.steps_per_epoch(batch_size))

    def batch(self, step: int, batch_size: int, seed: int, rank: int = 0, world_size: int = 1) -> torch.Tensor:
        """This rank's disjoint share `[batch_size / world_size, block_size + 1]` of global batch `step`.

        Each epoch takes the training blocks in an order drawn from `seed + epoch`; when their count
        is not a multiple of `batch_size` the last few of that order sit the epoch out.
        """
        return self.train[self.batch_indices(step, batch_size, seed, rank, world_size)].long()

    def batch_indices(self, step: int, batch_size: int, seed: int, rank: int = 0, world_size: int = 1) -> torch.Tensor:
        """The rows of `train` that `batch` returns, for data computed once per block (a target's states)."""
        if batch_size % world_size:
            raise ValueError(f"batch_size ({batch_size}) must be a multiple of the number of processes ({world_size})")
        if self.steps_per_epoch(batch_size) == 0:
            raise ValueError(
                f"the corpus gives {len(self.train)} training blocks, fewer than one batch of {batch_size}: "
                "add text or lower --batch-size / --block-size"
            )
        epoch, index = self.position(step, batch_size)
        per_rank = batch_size // world_size
        start = index * batch_size + rank * per_rank
        return self._order(epoch, seed)[start : start + per_rank]

    def _order(self, epoch: int, seed: int) -> torch.Tensor:
        if self._order_cache is None or self._order_cache[0] != (seed, epoch):
            generator = torch.Generator().manual_seed(seed + epoch)
            self._order_cache = ((seed, epoch), torch.randperm(len(self.train), generator=generator))
        return self._order_cache[1]


def token_stream(tokenizer: Tokenizer, documents: list[str], bos: int = BOS_ID, eos: int = EOS_ID) -> torch.Tensor:
    """All documents' tokens `[N]` (int32, to halve memory), each as `<bos> document <eos>`.

    Every decision input starts with `<bos>`, so pretraining shows the model that token too.
    """
    ids: list[int] = []
    for encoding in tokenizer.encode_batch(documents):
        ids.append(bos)
        ids.extend(encoding.ids)
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.int32)
