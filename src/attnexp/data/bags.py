"""Bags of items drawn from a labelled pool, built by tensor indexing (no per-item Python).

The samplers below draw the bags, a batch at a time, and the DataLoader hands each batch of bags
to `BagPool`, which gathers the images. So the randomness lives in the main process: DataLoader
workers only gather, and cannot each replay one copied generator.

Shapes: M bags, B bags per batch, T slots per bag (padded to the largest bag), N pool items.
"""

from collections.abc import Iterator

import torch
from torch.utils.data import Dataset, Sampler

from attnexp.data.seeds import epoch_seed
from attnexp.errors import ConfigError

LABEL_RULES = ("largest", "parity")
Bags = tuple[torch.Tensor, torch.Tensor]  # item indices (B, T), mask (B, T)


def sample_bags(
    num_bags: int, pool_size: int, min_size: int, max_size: int, generator: torch.Generator
) -> Bags:
    """Random bags: item indices (M, T) and mask (M, T); padded slots point at item 0."""
    index = torch.randint(0, pool_size, (num_bags, max_size), generator=generator)
    sizes = torch.randint(min_size, max_size + 1, (num_bags,), generator=generator)
    mask = torch.arange(max_size)[None, :] < sizes[:, None]
    return index * mask, mask


def bag_labels(
    item_labels: torch.Tensor, index: torch.Tensor, mask: torch.Tensor, rule: str
) -> torch.Tensor:
    """largest: the largest label in the bag; parity: largest if the labels sum to even, else smallest."""
    labels = item_labels[index]  # (M, T)
    largest = labels.masked_fill(~mask, torch.iinfo(labels.dtype).min).amax(dim=1)
    if rule == "largest":
        return largest
    if rule == "parity":
        smallest = labels.masked_fill(~mask, torch.iinfo(labels.dtype).max).amin(dim=1)
        even = (labels * mask).sum(dim=1) % 2 == 0
        return torch.where(even, largest, smallest)
    check_rule(rule)
    raise AssertionError("unreachable")


def check_rule(rule: str) -> None:
    if rule not in LABEL_RULES:
        raise ConfigError(
            f"label rule '{rule}' is not one of {', '.join(LABEL_RULES)} (set data.label_rule=...)"
        )


def check_sizes(min_size: int, max_size: int) -> None:
    if not 1 <= min_size <= max_size:
        raise ConfigError(
            f"bag sizes must satisfy 1 <= min <= max, got min={min_size}, max={max_size} (set data.bag_size / data.min_bag_size)"
        )


class BagPool(Dataset):
    """A labelled uint8 image pool (N, S, S), read a batch of bags at a time.

    Indexed with bags (index (B, T), mask (B, T)) as the samplers below yield them, it returns
    items (B, T, S, S) uint8, mask (B, T) and labels (B,).
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, rule: str) -> None:
        check_rule(rule)
        self.images, self.labels, self.rule = images, labels, rule

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, bags: Bags) -> dict[str, torch.Tensor]:
        index, mask = bags
        return {
            "items": self.images[index],
            "mask": mask,
            "labels": bag_labels(self.labels, index, mask, self.rule),
        }


class _BagSampler(Sampler[Bags]):
    """Yields batches of `batch_size` bags of `min_size`..`max_size` items from a pool."""

    def __init__(
        self,
        pool_size: int,
        num_bags: int,
        min_size: int,
        max_size: int,
        batch_size: int,
        seed: int,
    ) -> None:
        check_sizes(min_size, max_size)
        self.pool_size, self.num_bags, self.batch_size = pool_size, num_bags, batch_size
        self.min_size, self.max_size, self.seed = min_size, max_size, seed

    def draw(self, num_bags: int, generator: torch.Generator) -> Bags:
        return sample_bags(num_bags, self.pool_size, self.min_size, self.max_size, generator)


class FixedBags(_BagSampler):
    """Validation/test bags: drawn once from `seed`, the same every epoch, in order; the last
    batch may be smaller, so every bag is evaluated."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.index, self.mask = self.draw(self.num_bags, torch.Generator().manual_seed(self.seed))

    def __len__(self) -> int:
        return -(-self.num_bags // self.batch_size)

    def __iter__(self) -> Iterator[Bags]:
        return zip(self.index.split(self.batch_size), self.mask.split(self.batch_size), strict=True)


class RandomBags(_BagSampler):
    """Training bags: `num_bags // batch_size` full batches of fresh bags every epoch.

    Full batches only: a last batch of one bag would break BatchNorm in train mode. Lightning
    calls `set_epoch` before each epoch (under DDP through its sampler wrapper, which then gives
    each rank its share of the epoch's batches).
    """

    epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_bags // self.batch_size

    def __iter__(self) -> Iterator[Bags]:
        generator = torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch))
        for _ in range(len(self)):
            yield self.draw(self.batch_size, generator)
