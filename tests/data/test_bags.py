import pytest
import torch

from attnexp.data.bags import (
    BagPool,
    FixedBags,
    RandomBags,
    bag_labels,
    sample_bags,
    shift_images,
)
from attnexp.data.seeds import epoch_seed
from attnexp.errors import ConfigError

LABELS = torch.tensor([3, 7, 1, 8, 2, 5])


def test_largest_and_parity_rules():
    index = torch.tensor([[0, 1, 2], [2, 4, 0], [3, 0, 0], [1, 3, 2]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 0, 0], [1, 0, 0]], dtype=torch.bool)
    # bags: {3,7,1} sum 11 odd; {1,2,3} sum 6 even; {8} even (padding ignored);
    # {7} odd, its padded slots holding a larger (8) and a smaller (1) label: both ignored
    assert bag_labels(LABELS, index, mask, "largest").tolist() == [7, 3, 8, 7]
    assert bag_labels(LABELS, index, mask, "parity").tolist() == [1, 3, 8, 7]


def test_parity_ignores_the_label_of_a_padded_slot():
    """Padded slots point at an item too (item 0, a 5 in MNIST): its label must not count."""
    index = torch.tensor([[4, 0, 1]])  # labels 2, 3 real; the padded slot holds item 1 (label 7)
    mask = torch.tensor([[True, True, False]])
    # real sum 5 (odd): the smallest, 2; with the padded 7 the sum would be 12 (even): 3
    assert bag_labels(LABELS, index, mask, "parity").tolist() == [2]
    index = torch.tensor([[4, 3, 1]])  # real 2, 8: sum 10 (even), the largest; with the 7: 17
    assert bag_labels(LABELS, index, mask, "parity").tolist() == [8]


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


IMAGES = torch.arange(6, dtype=torch.uint8)[:, None, None].expand(6, 2, 2).contiguous()


def fixed(seed=0, min_size=3, max_size=3, batch_size=10):
    return FixedBags(6, 10, min_size, max_size, batch_size, seed)


def batches(bags):
    return [BagPool(IMAGES, LABELS, "largest")[b] for b in bags]


def test_fixed_bags_are_fixed_per_seed():
    a, b = batches(fixed()), batches(fixed())
    assert all(torch.equal(a[0][k], b[0][k]) for k in ("items", "mask", "labels"))
    assert torch.equal(batches(fixed())[0]["items"], a[0]["items"])
    assert not torch.equal(batches(fixed(seed=1))[0]["items"], a[0]["items"])
    # every bag, in order; the last batch is smaller
    assert [len(x["labels"]) for x in batches(fixed(batch_size=4))] == [4, 4, 2]
    # ... and the sampler says so: Lightning reads len() to know how many test batches to run
    assert len(fixed(batch_size=4)) == 3 and len(fixed(batch_size=5)) == 2
    assert torch.equal(torch.cat([x["items"] for x in batches(fixed(batch_size=4))]), a[0]["items"])


def test_fixed_bags_are_the_same_on_every_pass():
    """Lightning iterates one val/test sampler every epoch: each pass must yield the same bags."""
    bags = fixed(min_size=1, max_size=4, batch_size=4)
    first = list(bags)
    for _ in range(2):
        again = list(bags)
        assert len(again) == len(first) == 3
        for (index, mask), (index2, mask2) in zip(first, again, strict=True):
            assert torch.equal(index, index2) and torch.equal(mask, mask2)


def test_training_bags_are_full_batches_drawn_per_epoch():
    bags = RandomBags(6, 10, 3, 3, 4, seed=0)
    first = batches(bags)
    assert [len(x["labels"]) for x in first] == [4, 4] == [4] * len(bags)
    assert torch.equal(batches(bags)[1]["items"], first[1]["items"])  # a function of the epoch
    bags.set_epoch(1)
    assert not torch.equal(batches(bags)[0]["items"], first[0]["items"])
    other = RandomBags(6, 10, 3, 3, 4, seed=0)
    other.set_epoch(1)
    assert torch.equal(batches(other)[0]["items"], batches(bags)[0]["items"])


def test_epoch_seed():
    assert epoch_seed(7, 0) == 7  # epoch 0 keeps the recorded stream
    seeds = {epoch_seed(s, e) for s in range(3) for e in range(1, 4)}
    assert len(seeds) == 9 and not seeds & {0, 1, 2}
    # a second stream of the same (seed, epoch) is another draw, epoch 0 included
    streams = {epoch_seed(s, e, 1) for s in range(3) for e in range(0, 4)}
    assert len(streams) == 12 and not streams & (seeds | {0, 1, 2})
    assert epoch_seed(7, 2, 1) == epoch_seed(7, 2, 1)


def moved_by_hand(image: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    out = torch.zeros_like(image)
    size = image.shape[-1]
    for i in range(size):
        for j in range(size):
            if 0 <= i - dy < size and 0 <= j - dx < size:
                out[i, j] = image[i - dy, j - dx]
    return out


def test_shift_images_moves_each_image_and_fills_with_background():
    images = torch.randint(1, 256, (2, 3, 6, 6), dtype=torch.uint8)  # no pixel is 0 before
    moves = torch.tensor([[[0, 0], [1, -2], [-2, 2]], [[2, 0], [0, -1], [-1, -1]]])
    out = shift_images(images, moves)
    assert out.shape == images.shape and out.dtype == torch.uint8
    for b in range(2):
        for t in range(3):
            dy, dx = moves[b, t].tolist()
            assert torch.equal(out[b, t], moved_by_hand(images[b, t], dy, dx)), (dy, dx)
    assert torch.equal(out[0, 0], images[0, 0])  # (0, 0) leaves the image as it was
    up_left = shift_images(images, torch.tensor([-1, -2]).expand(2, 3, 2))  # no move positive
    assert torch.equal(up_left[1, 2], moved_by_hand(images[1, 2], -1, -2))
    assert (out[1, 0, :2] == 0).all() and (out[1, 0, 2:] != 0).all()  # moved down 2: top rows empty


def test_shifted_training_bags_are_the_same_bags_moved():
    plain, shifted = RandomBags(6, 40, 3, 3, 8, seed=0), RandomBags(6, 40, 3, 3, 8, seed=0, shift=2)
    for epoch in (0, 1):
        plain.set_epoch(epoch)
        shifted.set_epoch(epoch)
        for (index, mask), (s_index, s_mask, moves) in zip(plain, shifted, strict=True):
            assert torch.equal(index, s_index) and torch.equal(mask, s_mask)
            assert moves.shape == (8, 3, 2) and moves.abs().max() <= 2
    drawn = torch.cat([bags[2] for bags in shifted])
    assert set(drawn.unique().tolist()) == {-2, -1, 0, 1, 2}
    assert torch.equal(drawn, torch.cat([bags[2] for bags in shifted]))  # a function of the epoch
    shifted.set_epoch(0)
    assert not torch.equal(drawn, torch.cat([bags[2] for bags in shifted]))  # drawn anew per epoch
    pool = BagPool(torch.randint(1, 256, (6, 5, 5), dtype=torch.uint8), LABELS, "largest")
    index, mask, moves = next(iter(shifted))
    batch = pool[(index, mask, moves)]
    assert torch.equal(batch["items"], shift_images(pool.images[index], moves))
    assert torch.equal(batch["labels"], pool[(index, mask)]["labels"])


def test_batch_contents_match_labels_and_mask():
    (batch,) = batches(fixed(min_size=1, max_size=4))
    assert batch["items"].shape == (10, 4, 2, 2) and batch["items"].dtype == torch.uint8
    assert batch["mask"].dtype == torch.bool
    for items, mask, label in zip(batch["items"], batch["mask"], batch["labels"], strict=True):
        digits = LABELS[items[mask][:, 0, 0].long()]  # pixel value = pool index
        assert int(label) == int(digits.max())


@pytest.mark.parametrize("sampler", [FixedBags, RandomBags])
def test_invalid_sizes(sampler):
    with pytest.raises(ConfigError, match="1 <= min <= max, got min=4, max=3"):
        sampler(6, 10, 4, 3, 2, 0)
    with pytest.raises(ConfigError, match="got min=0"):
        sampler(6, 10, 0, 3, 2, 0)
