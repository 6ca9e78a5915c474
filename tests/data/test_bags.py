import pytest
import torch

from attnexp.data.bags import BagDataset, bag_labels, sample_bags
from attnexp.errors import ConfigError

LABELS = torch.tensor([3, 7, 1, 8, 2, 5])


def test_largest_and_parity_rules():
    index = torch.tensor([[0, 1, 2], [2, 4, 0], [3, 0, 0]])
    mask = torch.tensor([[True, True, True], [True, True, True], [True, False, False]])
    # bags: {3,7,1} sum 11 odd; {1,2,3} sum 6 even; {8} even (padding ignored)
    assert bag_labels(LABELS, index, mask, "largest").tolist() == [7, 3, 8]
    assert bag_labels(LABELS, index, mask, "parity").tolist() == [1, 3, 8]


def test_unknown_rule():
    with pytest.raises(
        ConfigError, match=r"label rule 'max' is not one of largest, parity \(set data.label_rule"
    ):
        bag_labels(
            LABELS, torch.zeros(1, 1, dtype=torch.long), torch.ones(1, 1, dtype=torch.bool), "max"
        )


def test_sample_bags_sizes_and_padding():
    index, mask = sample_bags(500, 6, 2, 4, torch.Generator().manual_seed(0))
    assert index.shape == mask.shape == (500, 4)
    sizes = mask.sum(1)
    assert sizes.min() == 2 and sizes.max() == 4
    assert (mask[:, :2]).all()  # real items first, then padding
    assert (index[~mask] == 0).all()


def make(resample, seed=0, min_size=3, max_size=3):
    images = torch.arange(6, dtype=torch.uint8)[:, None, None].expand(6, 2, 2).contiguous()
    return BagDataset(
        images, LABELS, 10, min_size, max_size, "largest", seed=seed, resample=resample
    )


def test_fixed_bags_are_fixed_per_seed():
    a, b = make(False), make(False)
    assert all(
        torch.equal(a[list(range(10))][k], b[list(range(10))][k])
        for k in ("items", "mask", "labels")
    )
    assert torch.equal(a[[1, 2]]["items"], a[[1, 2]]["items"])
    assert not torch.equal(
        make(False, seed=1)[list(range(10))]["items"], a[list(range(10))]["items"]
    )


def test_training_bags_are_resampled_reproducibly():
    a, b = make(True), make(True)
    first, second = a[list(range(10))], a[list(range(10))]
    assert not torch.equal(first["items"], second["items"])
    assert torch.equal(b[list(range(10))]["items"], first["items"])  # same seed, same sequence


def test_batch_contents_match_labels_and_mask():
    data = make(False, min_size=1, max_size=4)
    batch = data[list(range(10))]
    assert batch["items"].shape == (10, 4, 2, 2) and batch["items"].dtype == torch.uint8
    assert batch["mask"].dtype == torch.bool
    for items, mask, label in zip(batch["items"], batch["mask"], batch["labels"], strict=True):
        digits = LABELS[items[mask][:, 0, 0].long()]  # pixel value = pool index
        assert int(label) == int(digits.max())


def test_invalid_sizes():
    with pytest.raises(ConfigError, match="1 <= min <= max, got min=4, max=3"):
        make(False, min_size=4, max_size=3)
    with pytest.raises(ConfigError, match="got min=0"):
        make(False, min_size=0, max_size=3)
