"""Bags of MNIST digits: a bag of T digit images, labelled by a rule over its digits."""

import itertools
import logging
from typing import Any

import torch
from pytorch_lightning.overrides.distributed import UnrepeatedDistributedSamplerWrapper
from torch.nn.modules.batchnorm import _BatchNorm  # BatchNorm1d/2d/3d and SyncBatchNorm
from torch.utils.data import DataLoader

from attnexp.data.bags import BagPool, FixedBags, RandomBags
from attnexp.data.base import AttnDataModule, Batching, check_settings, data_hash, fingerprint
from attnexp.data.mnist import IMAGE_SIZE, load_mnist
from attnexp.data.resumable import ResumableLoader
from attnexp.data.seeds import loader_generator
from attnexp.errors import ConfigError

log = logging.getLogger(__name__)

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
NUM_CLASSES = 10


def bag_loader(
    pool: BagPool,
    bags: FixedBags | RandomBags,
    num_workers: int,
    seed: int,
    resume_at: dict | None = None,
) -> DataLoader:
    """The sampler yields whole batches of bags (no collation), the pool gathers their images.
    Training bags (drawn anew each epoch) come through a loader Lightning can resume mid-epoch
    (`resume_at`: the checkpoint's position, from `AttnDataModule.resume_position`)."""
    train = isinstance(bags, RandomBags)
    # no loader draws from torch's global generator (see ResumableLoader)
    own = {"seed": seed, "resume_at": resume_at} if train else {"generator": loader_generator(seed)}
    return (ResumableLoader if train else DataLoader)(
        pool,
        sampler=bags,
        batch_size=None,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        **own,
    )


class BagMNISTDataModule(AttnDataModule):
    """Args:
    data_dir: folder holding `mnist/` with the four IDX `*-ubyte.gz` files.
    source: auto | local | hub | sample.
    bag_size: T for training and the main val/test sets (the largest size when `variable`).
    variable: train on bags of min_bag_size..bag_size items (padded, masked).
    label_rule: largest | parity.
    val_fraction: share of training images held out (fixed for the seed) for validation bags.
    eval_bag_sizes: extra fixed-size test sets, logged as test/acc_bag{n}.
    eval_variable_max: extra test set of bags of 1..n items, logged as test/acc_variable (0: none).
    batch_size / num_workers / seed: bags per batch, loader processes, the seed of every draw
        (`Batching`).
    num_train_bags: bags per training epoch (null: one per training image, as in the book, so
        10 epochs match its 10 epochs), in whole batches: the incomplete last batch is dropped.
    num_eval_bags: bags per val/test set (null: pool size // mean bag size).
    shift: training digits are moved by up to this many pixels along each axis, drawn anew every
        epoch (a random translation; 0: none). Validation and test digits are never moved.
    on_device: keep the images (uint8, 47 MB for MNIST) on the training device and draw the
        training bags there, so that a step copies nothing from the host and waits for no CPU
        work. auto: on a CUDA device when num_workers=0. The training bags then come from the
        device's generator: other bags than the CPU's for the same seed (the same ones on every
        run on that device); the evaluation bags are the same everywhere.
    """

    input_kind = "bags"
    dataset_name = "MNIST"
    data_subdir = "mnist"

    def __init__(
        self,
        data_dir: str,
        source: str = "auto",
        bag_size: int = 3,
        variable: bool = False,
        min_bag_size: int = 1,
        label_rule: str = "largest",
        val_fraction: float = 0.1,
        eval_bag_sizes: list[int] | tuple[int, ...] = tuple(range(1, 13)),
        eval_variable_max: int = 6,
        num_train_bags: int | None = None,
        num_eval_bags: int | None = None,
        shift: int = 0,
        on_device: bool | str = "auto",
        **batching: Any,
    ) -> None:
        check_settings(
            bag_size=bag_size,
            min_bag_size=min_bag_size,
            val_fraction=val_fraction,
            eval_variable_max=eval_variable_max,
            num_train_bags=num_train_bags,
            num_eval_bags=num_eval_bags,
            shift=shift,
            on_device=on_device,
            label_rule=label_rule,
            # in code, no extra test set may also be said as []
            **({} if eval_bag_sizes in ([], ()) else {"eval_bag_sizes": eval_bag_sizes}),
        )
        super().__init__(data_dir, source, Batching.of(self, batching))
        if on_device is True and self.num_workers > 0:
            raise ConfigError(
                f"data.on_device=true draws the bags on the training device, which "
                f"data.num_workers={self.num_workers} worker processes cannot share (set "
                f"data.num_workers=0 or data.on_device=false)"
            )
        if variable and min_bag_size > bag_size:
            raise ConfigError(
                f"data.min_bag_size={min_bag_size} is larger than data.bag_size={bag_size}"
            )
        self.bag_size, self.variable, self.min_bag_size = bag_size, variable, min_bag_size
        self.label_rule, self.val_fraction = label_rule, val_fraction
        self.eval_bag_sizes = [int(n) for n in eval_bag_sizes]
        self.eval_variable_max, self.shift, self.on_device = eval_variable_max, shift, on_device
        self.num_train_bags, self.num_eval_bags = num_train_bags, num_eval_bags
        self.splits: dict | None = None
        self._device_splits: dict[tuple[str, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}
        self.batch_norm = False  # whether the model has BatchNorm (set by adapt_to)

    @property
    def model_kwargs(self) -> dict:
        return {
            "num_classes": NUM_CLASSES,
            "image_size": IMAGE_SIZE,
            "channels": 1,
            "bag_size": self.bag_size,
        }

    @property
    def test_set_names(self) -> list[str]:
        names = [f"bag{n}" for n in self.eval_bag_sizes]
        return names + (["variable"] if self.eval_variable_max > 0 else [])

    def adapt_to(self, model: torch.nn.Module) -> None:
        self.batch_norm = any(isinstance(m, _BatchNorm) for m in model.modules())
        limit = getattr(model, "max_bag_size", None)
        if limit is None:
            return
        too_big = [n for n in self.eval_bag_sizes if n > limit]
        name = type(model).__name__
        if too_big:
            self.note(f"{name} takes at most {limit} items: skipping test bags of sizes {too_big}")
        self.eval_bag_sizes = [n for n in self.eval_bag_sizes if n <= limit]
        if self.eval_variable_max > limit:
            self.note(
                f"{name} takes at most {limit} items: skipping the variable "
                f"1..{self.eval_variable_max} test set"
            )
            self.eval_variable_max = 0

    def setup(self, stage: str | None = None) -> None:
        if self.splits is not None:
            return
        splits, self.source = load_mnist(self.data_dir, self.source_request)
        self.data_hash = data_hash(splits)
        images, labels = splits["train"]
        num_val = int(len(images) * self.val_fraction)
        if not 0 < num_val < len(images):
            raise ConfigError(
                f"data.val_fraction={self.val_fraction} of the {len(images)} training images "
                f"leaves {num_val} for validation bags and {len(images) - num_val} for training "
                f"bags: each needs one (set data.val_fraction=...)"
            )
        if self.shift >= images.shape[-1]:
            raise ConfigError(
                f"data.shift={self.shift} would move a {images.shape[-1]}-pixel digit out of its "
                f"image: it must be less than {images.shape[-1]} (set data.shift=...; 2 is usual)"
            )
        perm = torch.randperm(len(images), generator=torch.Generator().manual_seed(self.seed))
        val, train = perm[:num_val], perm[num_val:]
        self.splits = {
            "train": (images[train], labels[train]),
            "val": (images[val], labels[val]),
            "test": splits["test"],
        }
        self.fingerprints = {name: fingerprint(*split) for name, split in self.splits.items()}
        log.info(
            "MNIST (%s): %d train / %d val / %d test images",
            self.source,
            len(train),
            len(val),
            len(splits["test"][0]),
        )

    def data_device(self) -> torch.device:
        """Where the bags are drawn and gathered (see `on_device`): the CPU, or the device the
        trainer trains on."""
        cpu = torch.device("cpu")
        strategy = getattr(self.trainer, "strategy", None)  # none: no trainer (or a stand-in)
        if self.on_device is False or strategy is None:
            return cpu
        device = strategy.root_device
        if self.on_device == "auto" and (device.type != "cuda" or self.num_workers > 0):
            return cpu
        return device

    def _split_on(self, split: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """A split's images and labels on `device`, copied there once."""
        if device.type == "cpu":
            return self.splits[split]
        key = (split, device)
        if key not in self._device_splits:
            self._device_splits[key] = tuple(x.to(device) for x in self.splits[split])
        return self._device_splits[key]

    def _fixed_bags(
        self,
        split: str,
        min_size: int,
        max_size: int,
        seed_offset: int,
        batch_size: int,
        device: torch.device | None = None,
    ) -> tuple[BagPool, FixedBags]:
        device = self.data_device() if device is None else device
        images, labels = self._split_on(split, device)
        default = len(images) // max(1, (min_size + max_size) // 2)
        num_bags = self.num_eval_bags if self.num_eval_bags is not None else default
        bags = FixedBags(
            len(images), num_bags, min_size, max_size, batch_size, self.seed * 1000 + seed_offset,
            device=device,
        )  # fmt: skip
        return BagPool(images, labels, self.label_rule), bags

    def _eval_loader(
        self, split: str, min_size: int, max_size: int, seed_offset: int
    ) -> DataLoader:
        pool, bags = self._fixed_bags(split, min_size, max_size, seed_offset, self.batch_size)
        return bag_loader(pool, self._rank_share(bags), self.num_workers, self.seed)

    def _rank_share(self, bags: FixedBags) -> FixedBags | UnrepeatedDistributedSamplerWrapper:
        """Under DDP, this rank's share of the val/test batches, with none repeated.

        Left to itself, Lightning wraps the sampler in a DistributedSampler that pads every rank
        to the same number of *batches* by repeating the first ones: 27 test batches on 8 GPUs
        become 32, and the 5 repeated full batches (640 bags) count twice in test/acc. A sampler
        that is already a DistributedSampler is left alone. Evaluation needs no equal step counts
        (the stats sync once, at epoch end), only a batch per rank.
        """
        world = getattr(self.trainer, "world_size", 1)
        if world < 2 or len(bags) < world:
            return bags
        return UnrepeatedDistributedSamplerWrapper(
            bags, num_replicas=world, rank=self.trainer.global_rank, shuffle=False
        )

    def _fit_loader(self, pool: BagPool, bags: FixedBags | RandomBags) -> DataLoader:
        """Training/validation batches. Under trainer.overfit_batches Lightning replaces every
        sampler but a sequential one by SequentialSampler(dataset), which a bag pool cannot read:
        then the first batches are drawn once and handed over as a list, in order."""
        overfit = self.trainer.overfit_batches if self.trainer is not None else 0
        if not overfit:
            if isinstance(bags, RandomBags):
                return bag_loader(pool, bags, self.num_workers, self.seed, self.resume_position())
            return bag_loader(pool, self._rank_share(bags), self.num_workers, self.seed)
        count = int(overfit) if overfit >= 1 else len(bags)
        batches = [pool[b] for b in itertools.islice(bags, count)]
        return DataLoader(batches, batch_size=None, generator=loader_generator(self.seed))

    def train_dataloader(self) -> DataLoader:
        device = self.data_device()
        if device.type != "cpu" and self.on_device == "auto":
            note = (
                f"data.on_device=auto: training bags drawn on {device.type} by its generator "
                f"(other bags than the CPU's for the same seed; data.on_device=false draws them "
                f"on the CPU)"
            )
            if note not in self.notes:
                self.note(note)
        images, labels = self._split_on("train", device)
        num_bags = self.num_train_bags if self.num_train_bags is not None else len(images)
        if num_bags < self.batch_size:
            raise ConfigError(
                f"{num_bags} training bags make no full batch of data.batch_size={self.batch_size} "
                "(training drops incomplete batches; set data.batch_size or data.num_train_bags)"
            )
        if self.batch_norm and self.batch_size < 2:
            raise ConfigError(
                f"data.batch_size={self.batch_size}: the model normalises over the batch "
                f"(BatchNorm), which needs at least 2 bags per training batch (set "
                f"data.batch_size=2 or more)"
            )
        min_size = self.min_bag_size if self.variable else self.bag_size
        # Every DDP rank draws the same batches from the same seed; Lightning's sampler wrapper
        # then hands each rank its own share of them.
        bags = RandomBags(
            len(images), num_bags, min_size, self.bag_size, self.batch_size, self.seed * 1000,
            shift=self.shift, device=device,
        )  # fmt: skip
        pool = BagPool(images, labels, self.label_rule, max_shift=self.shift)
        return self._fit_loader(pool, bags)

    def val_dataloader(self) -> DataLoader:
        return self._fit_loader(
            *self._fixed_bags("val", self.bag_size, self.bag_size, 1, self.batch_size)
        )

    def test_dataloader(self) -> list[DataLoader]:
        sets = [self._eval_loader("test", self.bag_size, self.bag_size, 2)]
        sets += [self._eval_loader("test", n, n, 100 + n) for n in self.eval_bag_sizes]
        if self.eval_variable_max > 0:
            sets.append(self._eval_loader("test", 1, self.eval_variable_max, 3))
        return sets

    def ground_truth_sets(self) -> dict[str, DataLoader]:
        """The main test set ("test", bags of bag_size) and the variable-size one ("variable",
        where the run has it): the same bags as the run's test, their batches also carrying each
        item's own digit, "item_labels" (B, T) (what `python -m attnexp.explain` checks the
        attention against)."""
        sets = {"test": (self.bag_size, self.bag_size, 2)}
        if self.eval_variable_max > 0:
            sets["variable"] = (1, self.eval_variable_max, 3)
        loaders = {}
        for name, (min_size, max_size, seed_offset) in sets.items():
            pool, bags = self._fixed_bags("test", min_size, max_size, seed_offset, self.batch_size)
            pool.item_labels = True
            loaders[name] = bag_loader(pool, bags, self.num_workers, self.seed)
        return loaders

    def on_after_batch_transfer(self, batch: dict, dataloader_idx: int) -> dict:
        """uint8 (B, T, S, S) -> normalised float (B, T, 1, S, S), padded slots zero; on the device,
        in the model's dtype (bf16 under trainer.precision=bf16-true)."""
        # In place on one fresh copy: the same operations in the same order as
        # `(x / 255 - mean) / std * mask`, so the same bits, without three more batch-sized
        # allocations (~0.08 ms a batch of 128 bags of 3 on one CPU core).
        items = batch["items"].to(torch.float32, copy=True)
        items.div_(255.0).sub_(MNIST_MEAN).div_(MNIST_STD).mul_(batch["mask"][:, :, None, None])
        module = self.trainer.lightning_module if self.trainer is not None else None
        dtype = module.dtype if module is not None else torch.float32
        return {**batch, "items": items.unsqueeze(2).to(dtype)}  # (B, T, 1, S, S): one channel

    def probe_batch(self, num_examples: int = 8) -> dict[str, torch.Tensor]:
        min_size = self.min_bag_size if self.variable else self.bag_size
        pool, bags = self._fixed_bags(
            "val", min_size, self.bag_size, 7, num_examples, device=torch.device("cpu")
        )
        return self.on_after_batch_transfer(pool[next(iter(bags))], 0)
