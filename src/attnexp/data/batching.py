"""Length-bucketed batching and padding for token sequences (shared by the text DataModules)."""

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of similar-length examples, so little of each batch is padding.

    Each epoch: shuffle the indices, cut them into pools of `batch_size * pool_batches`, sort each
    pool by length, cut it into batches, and shuffle the batches. Every index appears exactly once
    per epoch. Without `shuffle` the order is fixed (sorted within pools), for val/test.
    """

    def __init__(
        self,
        lengths: Sequence[int] | torch.Tensor,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        pool_batches: int = 50,
        drop_last: bool = False,
    ) -> None:
        self.lengths = torch.as_tensor(lengths)
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.pool_size = batch_size * pool_batches
        self.drop_last = drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning each epoch: a new, reproducible order."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        n = len(self.lengths)
        order = torch.randperm(n, generator=generator) if self.shuffle else torch.arange(n)
        batches = []
        for pool in order.split(self.pool_size):
            pool = pool[torch.argsort(self.lengths[pool], stable=True)]
            batches += [
                b
                for b in pool.split(self.batch_size)
                if not self.drop_last or len(b) == self.batch_size
            ]
        if self.shuffle:
            batches = [batches[i] for i in torch.randperm(len(batches), generator=generator)]
        return iter([b.tolist() for b in batches])

    def __len__(self) -> int:
        n = len(self.lengths)
        if self.drop_last:
            return sum(len(p) // self.batch_size for p in torch.arange(n).split(self.pool_size))
        return sum(-(-len(p) // self.batch_size) for p in torch.arange(n).split(self.pool_size))


def pad_sequences(
    sequences: Sequence[Sequence[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged token ids -> ids (B, T) padded with pad_id, mask (B, T) True on real tokens."""
    T = max((len(s) for s in sequences), default=0)
    ids = torch.full((len(sequences), max(T, 1)), pad_id, dtype=torch.long)
    mask = torch.zeros(len(sequences), max(T, 1), dtype=torch.bool)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
        mask[row, : len(seq)] = True
    return ids, mask
