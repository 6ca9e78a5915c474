"""Bags of items drawn from a labelled pool, built by tensor indexing (no per-item Python).

Shapes: M bags, T slots per bag (padded to the largest bag), N pool items.
"""

import torch
from torch.utils.data import Dataset

from attnexp.errors import ConfigError

LABEL_RULES = ("largest", "parity")


def sample_bags(
    num_bags: int, pool_size: int, min_size: int, max_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
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


class BagDataset(Dataset):
    """Bags over a uint8 image pool. Indexed with a list of bag positions, it returns a whole batch.

    With `resample=True` (training) each call draws fresh bags from the dataset's own generator,
    so every epoch sees new bags, reproducibly for a seed; otherwise the bags are fixed at init.
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        num_bags: int,
        min_size: int,
        max_size: int,
        rule: str,
        seed: int,
        resample: bool = False,
    ) -> None:
        if not 1 <= min_size <= max_size:
            raise ConfigError(
                f"bag sizes must satisfy 1 <= min <= max, got min={min_size}, max={max_size} (set data.bag_size / data.min_bag_size)"
            )
        check_rule(rule)
        self.images, self.labels = images, labels
        self.num_bags, self.min_size, self.max_size = num_bags, min_size, max_size
        self.rule, self.resample = rule, resample
        self.generator = torch.Generator().manual_seed(seed)
        if not resample:
            self.index, self.mask = sample_bags(
                num_bags, len(images), min_size, max_size, self.generator
            )
            self.bag_labels = bag_labels(labels, self.index, self.mask, rule)

    def __len__(self) -> int:
        return self.num_bags

    def __getitem__(self, positions: list[int]) -> dict[str, torch.Tensor]:
        if self.resample:
            index, mask = sample_bags(
                len(positions), len(self.images), self.min_size, self.max_size, self.generator
            )
            labels = bag_labels(self.labels, index, mask, self.rule)
        else:
            positions = torch.as_tensor(positions)
            index, mask, labels = (
                self.index[positions],
                self.mask[positions],
                self.bag_labels[positions],
            )
        return {
            "items": self.images[index],
            "mask": mask,
            "labels": labels,
        }  # items (B, T, S, S) uint8
