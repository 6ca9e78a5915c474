import pytest
import torch

from attnexp.data.batching import BucketBatchSampler, pad_sequences

LENGTHS = [5, 1, 9, 3, 3, 7, 2, 8, 4, 6, 10, 1, 2]


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("batch_size,pool_batches", [(3, 2), (4, 50), (1, 1)])
def test_every_index_exactly_once(shuffle, batch_size, pool_batches):
    sampler = BucketBatchSampler(LENGTHS, batch_size, shuffle=shuffle, pool_batches=pool_batches)
    batches = list(sampler)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(LENGTHS)))
    assert len(batches) == len(sampler)
    assert all(1 <= len(b) <= batch_size for b in batches)


def test_buckets_sorted_within_pool_and_epochs_differ():
    sampler = BucketBatchSampler(LENGTHS, 3, shuffle=True, seed=1, pool_batches=100)
    for batch in sampler:
        lengths = [LENGTHS[i] for i in batch]
        assert lengths == sorted(lengths)
    first = list(sampler)
    assert first == list(sampler)  # same epoch: same order
    sampler.set_epoch(1)
    assert list(sampler) != first


def test_drop_last():
    sampler = BucketBatchSampler(LENGTHS, 4, shuffle=False, pool_batches=100, drop_last=True)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 3 and all(len(b) == 4 for b in batches)


def test_pad_sequences():
    ids, mask = pad_sequences([[5, 6, 7], [8], []], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0], [0, 0, 0]]
    assert mask.tolist() == [[True] * 3, [True, False, False], [False] * 3]
    assert ids.dtype == torch.long and mask.dtype == torch.bool
    ids, mask = pad_sequences([[], []], pad_id=1)
    assert ids.shape == (2, 1) and not mask.any()
