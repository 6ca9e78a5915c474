import pytest
import torch
from torch.utils.data import DistributedSampler

from attnexp.data.batching import (
    BucketBatchSampler,
    bucket_batch_sampler,
    bucketed_loader,
    collate_tokens,
    pad_sequences,
)
from attnexp.data.resumable import ResumableLoader

LENGTHS = [5, 1, 9, 3, 3, 7, 2, 8, 4, 6, 10, 1, 2]


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("batch_size,pool_batches", [(3, 2), (4, 50), (1, 1)])
def test_every_index_exactly_once(shuffle, batch_size, pool_batches):
    sampler = bucket_batch_sampler(LENGTHS, batch_size, shuffle, pool_batches=pool_batches)
    batches = list(sampler)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(LENGTHS)))
    assert len(batches) == len(sampler)
    assert all(1 <= len(b) <= batch_size for b in batches)


def epoch_sampler(seed: int, pool_batches: int) -> BucketBatchSampler:
    """Over one replica of the index sampler Lightning injects under DDP, which has set_epoch."""
    indices = DistributedSampler(range(len(LENGTHS)), num_replicas=1, rank=0, seed=seed)
    return BucketBatchSampler(
        indices, 3, lengths=LENGTHS, shuffle=True, seed=seed, pool_batches=pool_batches
    )


def test_buckets_sorted_within_pool_and_epochs_differ():
    sampler = epoch_sampler(1, 100)
    for batch in sampler:
        lengths = [LENGTHS[i] for i in batch]
        assert lengths == sorted(lengths)
    first = list(sampler)
    assert first == list(sampler)  # same epoch: same order
    sampler.sampler.set_epoch(1)
    assert list(sampler) != first


def test_batch_order_is_pinned():
    """A seed's batches are part of its results: a changed order changes every number.
    Each epoch's order is drawn from `epoch_seed(seed, epoch)`."""
    epoch0 = [[3, 0, 7], [4], [5, 2, 10], [1, 8, 9], [11, 6, 12]]
    epoch1 = [[7], [1, 6, 3], [8, 5, 10], [11, 12, 4], [0, 9, 2]]
    sampler = bucket_batch_sampler(LENGTHS, 3, shuffle=True, seed=1, pool_batches=2)
    assert list(sampler) == epoch0 == list(sampler)
    sampler.sampler.set_epoch(1)  # as Lightning does each epoch
    assert list(sampler) == epoch1
    # one DDP replica gives the same batches in epoch 0; later, its index order is that of
    # torch's DistributedSampler (seeded with seed + epoch)
    replica = epoch_sampler(1, 2)
    assert list(replica) == epoch0
    fixed = bucket_batch_sampler(LENGTHS, 3, shuffle=False, pool_batches=2)
    assert list(fixed) == [[1, 3, 4], [0, 5, 2], [11, 6, 8], [9, 7, 10], [12]]


def test_drop_last():
    sampler = bucket_batch_sampler(LENGTHS, 4, shuffle=False, pool_batches=100, drop_last=True)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 3 and all(len(b) == 4 for b in batches)


@pytest.mark.parametrize("pool_batches", [1, 2, 100])
def test_drop_last_drops_any_short_batch(pool_batches):
    """One short of batch_size is short too, in whichever pool it falls."""
    sampler = bucket_batch_sampler(
        list(range(15)), 4, shuffle=False, pool_batches=pool_batches, drop_last=True
    )
    batches = list(sampler)
    assert len(batches) == len(sampler) == 3 and all(len(b) == 4 for b in batches)


def test_pad_sequences():
    ids, mask = pad_sequences([[5, 6, 7], [8], []], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0], [0, 0, 0]]
    assert mask.tolist() == [[True] * 3, [True, False, False], [False] * 3]
    assert ids.dtype == torch.long and mask.dtype == torch.bool
    ids, mask = pad_sequences([[], []], pad_id=1)
    assert ids.tolist() == [[1], [1]] and not mask.any()  # pad_id, not 0 (a vocab_file's)
    ids, mask = pad_sequences([torch.tensor([5, 6], dtype=torch.int32), torch.tensor([7])], 0)
    assert ids.tolist() == [[5, 6], [7, 0]] and ids.dtype == torch.long
    ids, mask = pad_sequences([], pad_id=0)
    assert ids.shape == mask.shape == (0, 1)


def test_collate_tokens_keeps_each_label_with_its_example():
    """A label moved to another row would train every text classifier on wrong targets."""
    batch = collate_tokens([([5, 6], 1), ([7], 0), ([8, 9, 4], 2)])
    assert batch["labels"].tolist() == [1, 0, 2]
    assert batch["input_ids"].tolist() == [[5, 6, 0], [7, 0, 0], [8, 9, 4]]
    assert batch["mask"].sum(1).tolist() == [2, 1, 3]


def test_no_seed_repeats_the_order_of_another_seeds_epoch():
    """Seeds must give independent runs: seed 1's epoch 0 is not seed 0's epoch 1."""

    def order(seed: int, epoch: int) -> list[list[int]]:
        sampler = bucket_batch_sampler(list(range(1, 61)), 4, True, seed=seed, pool_batches=2)
        sampler.sampler.set_epoch(epoch)
        return list(sampler)

    assert order(0, 1) != order(1, 0) and order(0, 2) != order(1, 1) != order(2, 0)
    assert order(3, 1) == order(3, 1)  # still a function of (seed, epoch)


@pytest.mark.parametrize("train", [True, False])
def test_bucketed_loader_serves_every_sample_once(train):
    dataset = [(i, length) for i, length in enumerate(LENGTHS)]
    loader = bucketed_loader(
        dataset,
        LENGTHS,
        4,
        train=train,
        seed=0,
        collate_fn=lambda examples: [i for i, _ in examples],
        num_workers=0,
        pool_batches=2,
    )
    # Training batches resume mid-epoch; the others are plain loaders.
    assert isinstance(loader, ResumableLoader) is train
    served = [i for batch in loader for i in batch]
    assert sorted(served) == list(range(len(LENGTHS)))
    assert len(served) == len(LENGTHS)
    # with workers, they stay up between epochs instead of being started (and sent the dataset)
    # again every epoch
    workers = bucketed_loader(
        dataset, LENGTHS, 4, train=train, seed=0, collate_fn=list, num_workers=2
    )
    one = bucketed_loader(dataset, LENGTHS, 4, train=train, seed=0, collate_fn=list, num_workers=1)
    assert workers.persistent_workers and one.persistent_workers and not loader.persistent_workers
