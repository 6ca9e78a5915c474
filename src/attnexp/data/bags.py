"""Bags of items drawn from a labelled pool, built by tensor indexing (no per-item Python).

The samplers below draw the bags, a batch at a time, and the DataLoader hands each batch of bags
to `BagPool`, which gathers the images. So the randomness lives in the main process: DataLoader
workers only gather, and cannot each replay one copied generator.

Everything here runs on the device its tensors are on: with the pool on a GPU and the training
bags drawn by a generator on it, a batch is drawn and gathered there, with no host work but the
kernel launches and no copy (`device=`; on the CPU the same code gives today's bags).

Shapes: M bags, B bags per batch, T slots per bag (padded to the largest bag), N pool items.
"""

from collections.abc import Iterator

import torch
from torch.utils.data import Dataset, Sampler

from attnexp.data.seeds import epoch_seed
from attnexp.errors import ConfigError
from attnexp.schema import rule_for

LABEL_RULES = rule_for("data.label_rule").choices
# item indices (B, T), mask (B, T), and for shifted training digits their moves (B, T, 2)
Bags = tuple[torch.Tensor, ...]
SHIFT_STREAM = 1  # epoch_seed stream of the shifts: the bags' own draws stay as they were


def sample_bags(
    num_bags: int, pool_size: int, min_size: int, max_size: int, generator: torch.Generator
) -> Bags:
    """Random bags: item indices (M, T) and mask (M, T), on the generator's device; padded slots
    point at item 0."""
    device = generator.device
    index = torch.randint(0, pool_size, (num_bags, max_size), generator=generator, device=device)
    sizes = torch.randint(min_size, max_size + 1, (num_bags,), generator=generator, device=device)
    mask = torch.arange(max_size, device=device)[None, :] < sizes[:, None]
    return index * mask, mask


def shift_images(
    images: torch.Tensor, moves: torch.Tensor, margin: int | None = None
) -> torch.Tensor:
    """Each image (..., S, S) moved down by dy and right by dx pixels, (dy, dx) = moves (..., 2);
    what moves in from outside is 0, MNIST's background. One gather for the whole batch.
    `margin`: the largest |move| there can be (None: read from `moves`, a device sync on a GPU)."""
    size, device = images.shape[-1], images.device
    flat, moves = images.reshape(-1, size, size), moves.reshape(-1, 2)
    if margin is None:
        margin = int(moves.abs().max()) if moves.numel() else 0
    padded = torch.nn.functional.pad(flat, (margin, margin, margin, margin))
    grid = torch.arange(size, device=device) + margin
    rows = grid[None, :] - moves[:, :1]  # output pixel (i, j) reads input (i - dy, j - dx)
    cols = grid[None, :] - moves[:, 1:]
    every = torch.arange(len(flat), device=device)
    moved = padded[every[:, None, None], rows[:, :, None], cols[:, None, :]]
    return moved.reshape(images.shape)


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

    Indexed with bags (index (B, T), mask (B, T)[, moves (B, T, 2)]) as the samplers below yield
    them, it returns items (B, T, S, S) uint8, each moved by its (dy, dx) if moves are given, mask
    (B, T) and labels (B,), on the pool's device. `max_shift`: the largest move the bags carry.
    `item_labels`: also each item's own label, "item_labels" (B, T) (the ground truth of which
    item decides a bag, for `python -m attnexp.explain`; not a model input).
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        rule: str,
        max_shift: int | None = None,
        item_labels: bool = False,
    ) -> None:
        check_rule(rule)
        self.images, self.labels, self.rule = images, labels, rule
        self.max_shift = max_shift
        self.item_labels = item_labels

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, bags: Bags) -> dict[str, torch.Tensor]:
        index, mask, *moves = bags
        items = self.images[index]
        batch = {
            "items": shift_images(items, moves[0], self.max_shift) if moves else items,
            "mask": mask,
            "labels": bag_labels(self.labels, index, mask, self.rule),
        }
        if self.item_labels:
            batch["item_labels"] = self.labels[index]  # (B, T); padded slots: item 0's
        return batch


class _BagSampler(Sampler[Bags]):
    """Yields batches of `batch_size` bags of `min_size`..`max_size` items from a pool, as
    tensors on `device` (where the pool is)."""

    def __init__(
        self,
        pool_size: int,
        num_bags: int,
        min_size: int,
        max_size: int,
        batch_size: int,
        seed: int,
        device: torch.device | str = "cpu",
    ) -> None:
        check_sizes(min_size, max_size)
        self.pool_size, self.num_bags, self.batch_size = pool_size, num_bags, batch_size
        self.min_size, self.max_size, self.seed = min_size, max_size, seed
        self.device = torch.device(device)

    def draw(self, num_bags: int, generator: torch.Generator) -> Bags:
        return sample_bags(num_bags, self.pool_size, self.min_size, self.max_size, generator)


class FixedBags(_BagSampler):
    """Validation/test bags: drawn once from `seed`, the same every epoch, in order; the last
    batch may be smaller, so every bag is evaluated. Drawn on the CPU whatever the device, then
    moved there: the same evaluation bags on every device."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        bags = self.draw(self.num_bags, torch.Generator().manual_seed(self.seed))
        self.index, self.mask = (x.to(self.device) for x in bags)

    def __len__(self) -> int:
        return -(-self.num_bags // self.batch_size)

    def __iter__(self) -> Iterator[Bags]:
        return zip(self.index.split(self.batch_size), self.mask.split(self.batch_size), strict=True)


class RandomBags(_BagSampler):
    """Training bags: `num_bags // batch_size` full batches of fresh bags every epoch.

    With `shift` > 0 every item is also moved by up to `shift` pixels along each axis (drawn from
    a stream of its own, so the bags are those of `shift=0`): a random translation.

    The generators are on `device`: on a GPU they draw other bags than the CPU's from the same
    seed (the same ones every time on that device).

    Full batches only: a last batch of one bag would break BatchNorm in train mode. Lightning
    calls `set_epoch` before each epoch (under DDP through its sampler wrapper, which then gives
    each rank its share of the epoch's batches).
    """

    epoch = 0

    def __init__(self, *args, shift: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.shift = shift

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_bags // self.batch_size

    def __iter__(self) -> Iterator[Bags]:
        device = self.device
        generator = torch.Generator(device).manual_seed(epoch_seed(self.seed, self.epoch))
        if self.shift:
            shifts = torch.Generator(device).manual_seed(
                epoch_seed(self.seed, self.epoch, SHIFT_STREAM)
            )
        for _ in range(len(self)):
            bags = self.draw(self.batch_size, generator)
            if self.shift:
                size = (self.batch_size, self.max_size, 2)
                moves = torch.randint(
                    -self.shift, self.shift + 1, size, generator=shifts, device=device
                )
                bags += (moves,)
            yield bags
