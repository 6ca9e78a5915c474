"""Length-bucketed batching and padding for token sequences, and the token-id datasets they batch
(shared by the text DataModules)."""

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import torch
from torch.utils.data import BatchSampler, DataLoader, Sampler

from attnexp.data.resumable import ResumableLoader
from attnexp.data.seeds import epoch_seed, loader_generator
from attnexp.data.text import PAD_ID

if TYPE_CHECKING:  # only a type here: the LCQMC loaders need no `datasets` import
    from datasets import Dataset


class BucketBatchSampler(BatchSampler):
    """Batches of similar-length examples, so little of each batch is padding.

    Each epoch: take the indices in the order `sampler` yields them, cut them into pools of
    `batch_size * pool_batches`, sort each pool by length, cut it into batches and, with
    `shuffle`, shuffle the batches. Every index the sampler yields appears exactly once.

    A `BatchSampler` over an index sampler, as Lightning expects: under DDP it re-creates this
    class around its `DistributedSampler`, so each rank buckets its own shard.

    Args:
        sampler: the indices of one epoch, in order (e.g. from `bucket_batch_sampler`).
        lengths: length of every example of the dataset, by index.
        shuffle: shuffle the batches, from `seed` and the sampler's epoch (if it has one).
    """

    def __init__(
        self,
        sampler: Sampler[int] | Iterable[int],
        batch_size: int,
        drop_last: bool = False,
        *,
        lengths: Sequence[int] | torch.Tensor,
        shuffle: bool = False,
        seed: int = 0,
        pool_batches: int = 50,
    ) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.lengths = torch.as_tensor(lengths)
        self.shuffle, self.seed = shuffle, seed
        self.pool_size = batch_size * pool_batches

    def __iter__(self) -> Iterator[list[int]]:
        order = torch.tensor(list(self.sampler), dtype=torch.long)
        batches = []
        for pool in order.split(self.pool_size):
            pool = pool[torch.argsort(self.lengths[pool], stable=True)]
            batches += [
                b
                for b in pool.split(self.batch_size)
                if not self.drop_last or len(b) == self.batch_size
            ]
        if self.shuffle:
            epoch = getattr(self.sampler, "epoch", 0)
            generator = torch.Generator().manual_seed(epoch_seed(self.seed, epoch))
            # The generator's first draw is the index order (EpochShuffle draws the same
            # permutation from the same seed); the batch order is its second. Drawing it here
            # too keeps every seed's batches what they are.
            torch.randperm(len(self.lengths), generator=generator)
            batches = [batches[i] for i in torch.randperm(len(batches), generator=generator)]
        return iter([b.tolist() for b in batches])

    def __len__(self) -> int:
        pools = torch.arange(len(self.sampler)).split(self.pool_size)
        if self.drop_last:
            return sum(len(p) // self.batch_size for p in pools)
        return sum(-(-len(p) // self.batch_size) for p in pools)


class EpochShuffle(Sampler[int]):
    """0..n-1 in a new order each epoch, drawn from (seed, epoch): Lightning calls `set_epoch`
    on `batch_sampler.sampler` (not on the batch sampler itself)."""

    def __init__(self, n: int, seed: int = 0) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch))
        return iter(torch.randperm(self.n, generator=generator).tolist())

    def __len__(self) -> int:
        return self.n


def bucket_batch_sampler(
    lengths: Sequence[int] | torch.Tensor,
    batch_size: int,
    shuffle: bool,
    seed: int = 0,
    pool_batches: int = 50,
    drop_last: bool = False,
) -> BucketBatchSampler:
    """The single-process batch sampler of the text DataModules (DDP swaps in its own `sampler`).

    shuffle: training batches, in a new order each epoch (drawn from seed and epoch); otherwise
        index order, for val/test.
    """
    order = EpochShuffle(len(lengths), seed) if shuffle else range(len(lengths))
    return BucketBatchSampler(
        order,
        batch_size,
        drop_last,
        lengths=lengths,
        shuffle=shuffle,
        seed=seed,
        pool_batches=pool_batches,
    )


def bucketed_loader(
    dataset: torch.utils.data.Dataset,
    lengths: Sequence[int] | torch.Tensor,
    batch_size: int,
    *,
    train: bool,
    seed: int,
    collate_fn: Callable,
    num_workers: int,
    pool_batches: int = 50,
    resume_at: dict | None = None,
    pin_memory: bool = False,
) -> DataLoader:
    """The text DataModules' loader over length-bucketed batches (see `bucket_batch_sampler`).

    The training loader is a `ResumableLoader`, so a resumed run picks its epoch up mid-way
    (`resume_at`: the checkpoint's position, from `AttnDataModule.resume_position`); `collate_fn` must pickle (a function or a partial, not a lambda) for spawned workers.
    pin_memory: batches in page-locked memory (`AttnDataModule.pins_memory`), so that Lightning's
        non_blocking copy to a GPU runs while the host goes on.
    """
    sampler = bucket_batch_sampler(lengths, batch_size, train, seed, pool_batches)
    # no loader draws from torch's global generator (see ResumableLoader)
    own = {"seed": seed, "resume_at": resume_at} if train else {"generator": loader_generator(seed)}
    return (ResumableLoader if train else DataLoader)(
        dataset,
        batch_sampler=sampler,
        **own,
        collate_fn=collate_fn,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        pin_memory=pin_memory,
    )


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


def collate_tokens(examples: list[tuple[list[int], int]]) -> dict[str, torch.Tensor]:
    ids, mask = pad_sequences([e[0] for e in examples], PAD_ID)
    return {"input_ids": ids, "mask": mask, "labels": torch.tensor([e[1] for e in examples])}


class TokenDataset(torch.utils.data.Dataset):
    """(token ids, label) pairs from the tokenized HF dataset (`tokenize_dataset`)."""

    collate = staticmethod(collate_tokens)  # a batch of what `__getitems__` gives

    def __init__(self, encoded: "Dataset", labels: list[int]) -> None:
        # datasets >= 4 gives a lazy column, read from Arrow on indexing; older versions a list.
        self.ids, self.labels = encoded["input_ids"], labels
        self.lengths: list[int] = encoded.select_columns(["length"])[:]["length"]  # one read

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> tuple[list[int], int]:
        return self.ids[i], self.labels[i]

    def __getitems__(self, indices: list[int]) -> list[tuple[list[int], int]]:
        """A whole batch, which the DataLoader asks for when this method exists. A lazy column
        reads a list of rows in one Arrow call: ~1 ms for 128 IMDB reviews, against ~12 ms for
        128 single reads (a CPU cost that weighs on a GPU run, whose steps take tens of ms)."""
        ids = [self.ids[i] for i in indices] if isinstance(self.ids, list) else self.ids[indices]
        return list(zip(ids, [self.labels[i] for i in indices], strict=True))


class QuestionPairDataset(torch.utils.data.Dataset):
    """Encoded question pairs: token ids and segment ids per example, plus labels; batches are
    padded with `pad_id`."""

    def __init__(
        self,
        ids: list[torch.Tensor],
        segments: list[torch.Tensor],
        labels: torch.Tensor,
        pad_id: int,
    ) -> None:
        self.ids, self.segments, self.labels, self.pad_id = ids, segments, labels, pad_id
        self.lengths = torch.tensor([len(s) for s in ids])

    @classmethod
    def from_flat(
        cls, flat: dict[str, torch.Tensor], labels: list[int], pad_id: int
    ) -> "QuestionPairDataset":
        """From the concatenated ids and segments of all pairs plus their lengths. The pairs are
        views of the two flat tensors: a dataset sent to DDP worker processes shares 2 storages, not
        one (and one file descriptor) per pair; a pickle of 20k small tensors also loads ~100x
        slower than the flat ones."""
        lengths = flat["lengths"].tolist()
        ids, segments = flat["ids"].split(lengths), flat["segments"].split(lengths)
        return cls(list(ids), list(segments), torch.tensor(labels), pad_id)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> int:
        return index  # the collate function gathers whole batches

    def collate(self, indices: list[int]) -> dict[str, torch.Tensor]:
        input_ids, mask = pad_sequences([self.ids[i] for i in indices], self.pad_id)  # (B, T)
        segment_ids, _ = pad_sequences([self.segments[i] for i in indices], 0)  # (B, T)
        return {
            "input_ids": input_ids,
            "segment_ids": segment_ids,
            "mask": mask,
            "labels": self.labels[indices],
        }
