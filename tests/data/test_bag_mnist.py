from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
from lightning_fabric.utilities.data import _set_sampler_epoch
from mnist_data import write_mnist

from attnexp.data.bag_mnist import BagMNISTDataModule
from attnexp.data.bags import bag_labels, sample_bags
from attnexp.data.mnist import load_mnist
from attnexp.errors import ConfigError
from attnexp.models.bag import BagMLP


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("data")
    write_mnist(path, num_train=200, num_test=60)
    return path


def make(data_dir, **kwargs):
    dm = BagMNISTDataModule(str(data_dir), **{"batch_size": 8, **kwargs})
    dm.setup("fit")
    return dm


def first(loader):
    return next(iter(loader))


def train_batches(dm, epoch: int) -> list[dict]:
    """One epoch of the training loader, with the epoch set as Lightning's fit loop sets it."""
    loader = dm.train_dataloader()
    _set_sampler_epoch(loader, epoch)
    batches = list(loader)
    if loader._iterator is not None:  # persistent workers: stopped now, not when collected (a
        loader._iterator._shutdown_workers()  # collection in a later test waited 5 s per worker)
    return batches


def test_splits_loaders_and_eval_sets(data_dir):
    dm = make(data_dir, eval_bag_sizes=[1, 5], eval_variable_max=4)
    assert dm.source == "local" and dm.num_classes == 10  # the task sizes its metrics by it
    assert len(dm.splits["train"][0]) == 180 and len(dm.splits["val"][0]) == 20
    assert dm.train_dataloader().sampler.num_bags == 180  # one training bag per training image
    assert dm.test_set_names == ["bag1", "bag5", "variable"]
    tests = dm.test_dataloader()
    assert [first(t)["items"].shape[1] for t in tests] == [3, 1, 5, 4]
    # the variable set holds bags of every size from 1 to eval_variable_max
    assert set(torch.cat([b["mask"].sum(1) for b in tests[-1]]).tolist()) == {1, 2, 3, 4}
    # every test bag is made of test images, none of them held out for validation
    test_images, val_images = image_set(dm.splits["test"][0]), image_set(dm.splits["val"][0])
    for loader in tests:
        drawn = image_set(torch.cat([b["items"][b["mask"]] for b in loader]))
        assert drawn <= test_images and not drawn & val_images
    batch = dm.on_after_batch_transfer(first(tests[-1]), 0)
    assert batch["items"].shape[2:] == (1, 28, 28) and batch["items"].dtype == torch.float32
    assert (batch["items"][~batch["mask"]] == 0).all()  # padded slots are zero after normalising


def test_normalising_keeps_the_formula_bits_and_the_input(data_dir):
    """`(x / 255 - mean) / std * mask` to the bit (recorded runs reproduce exactly), computed on a
    copy: the loader's batch, uint8 or already float, is left as it was."""
    from attnexp.data.bag_mnist import MNIST_MEAN, MNIST_STD

    dm = make(data_dir, eval_variable_max=4)
    raw = first(dm.test_dataloader()[-1])
    expected = (
        (raw["items"].float() / 255.0 - MNIST_MEAN) / MNIST_STD * raw["mask"][:, :, None, None]
    )
    for items in (raw["items"], raw["items"].float()):
        kept = items.clone()
        batch = dm.on_after_batch_transfer({**raw, "items": items}, 0)
        assert torch.equal(batch["items"][:, :, 0], expected)
        assert torch.equal(items, kept)


def test_val_and_test_bags_fixed_per_seed_train_bags_resampled(data_dir):
    a, b = make(data_dir), make(data_dir)
    assert torch.equal(first(a.val_dataloader())["items"], first(b.val_dataloader())["items"])
    assert torch.equal(
        first(a.test_dataloader()[0])["labels"], first(b.test_dataloader()[0])["labels"]
    )
    assert torch.equal(first(a.val_dataloader())["items"], first(a.val_dataloader())["items"])
    assert not torch.equal(train_batches(a, 0)[0]["items"], train_batches(a, 1)[0]["items"])
    c = make(data_dir, seed=1)
    assert not torch.equal(first(a.val_dataloader())["items"], first(c.val_dataloader())["items"])


def test_one_val_or_test_loader_gives_the_same_bags_every_pass(data_dir):
    """Lightning reads the same val loader every epoch (and may test twice with one loader)."""
    dm = make(data_dir, batch_size=2, eval_bag_sizes=[2], eval_variable_max=4)
    for loader in (dm.val_dataloader(), *dm.test_dataloader()):
        passes = [list(loader) for _ in range(3)]
        assert len(passes[0]) > 1
        for later in passes[1:]:
            for a, b in zip(passes[0], later, strict=True):
                assert all(torch.equal(a[k], b[k]) for k in ("items", "mask", "labels"))


def test_validation_images_are_a_seeded_draw(data_dir):
    """The held-out images are a random draw fixed by data.seed, not the first ones of the file."""
    splits, _ = load_mnist(data_dir, "local")
    images = splits["train"][0]
    dm, other = make(data_dir), make(data_dir, seed=1)
    val, train = dm.splits["val"][0], dm.splits["train"][0]
    assert len(val) == 20 and not torch.equal(val, images[:20])
    assert not torch.equal(other.splits["val"][0], val)
    assert torch.equal(make(data_dir).splits["val"][0], val)
    # a split: every training image (random noise, so each unique) lands on exactly one side
    held_out, kept = image_set(val), image_set(train)
    assert not held_out & kept and held_out | kept == image_set(images)


def image_set(images: torch.Tensor) -> set[bytes]:
    return {bytes(image.flatten().tolist()) for image in images}


def test_shift_moves_training_digits_only(data_dir):
    plain, shifted = make(data_dir), make(data_dir, shift=2)
    for a, b in zip(train_batches(plain, 1), train_batches(shifted, 1), strict=True):
        assert torch.equal(a["labels"], b["labels"]) and torch.equal(a["mask"], b["mask"])
        assert not torch.equal(a["items"], b["items"])
        # the same digits, moved: no ink is made, and a 2-pixel move keeps most of it
        assert b["items"].sum() <= a["items"].sum()
        assert b["items"].float().sum() > 0.9 * a["items"].float().sum()
    for loader in ("val_dataloader", "test_dataloader"):
        want, got = getattr(plain, loader)(), getattr(shifted, loader)()
        want, got = (want, got) if loader == "val_dataloader" else (want[0], got[0])
        assert all(torch.equal(x["items"], y["items"]) for x, y in zip(want, got, strict=True))


def test_shift_must_keep_the_digit_in_its_image(data_dir):
    with pytest.raises(
        ConfigError, match=r"data.shift=28 would move a 28-pixel digit out of its image"
    ):
        make(data_dir, shift=28)


def test_variable_training_bags(data_dir):
    dm = make(data_dir, variable=True, bag_size=5, min_bag_size=2)
    sizes = torch.cat([b["mask"].sum(1) for b in dm.train_dataloader()])
    assert sizes.min() >= 2 and sizes.max() <= 5 and len(set(sizes.tolist())) > 1


def test_adapt_to_a_model_with_a_size_limit(data_dir):
    fits = make(data_dir, eval_bag_sizes=[1, 3], eval_variable_max=3)
    fits.adapt_to(BagMLP(10, bag_size=3, image_size=28))  # every test bag fits: nothing dropped
    assert fits.test_set_names == ["bag1", "bag3", "variable"] and fits.notes == []
    dm = make(data_dir, eval_bag_sizes=[1, 3, 4], eval_variable_max=6)
    dm.adapt_to(BagMLP(10, bag_size=3, image_size=28))
    assert dm.eval_bag_sizes == [1, 3] and dm.eval_variable_max == 0
    assert dm.test_set_names == ["bag1", "bag3"]
    # Each dropped test set is noted, for the run's metrics.json.
    assert dm.notes == [
        "BagMLP takes at most 3 items: skipping test bags of sizes [4]",
        "BagMLP takes at most 3 items: skipping the variable 1..6 test set",
    ]


def test_one_bag_batches_are_refused_for_a_model_with_batchnorm(data_dir):
    """A training batch of one bag breaks BatchNorm in train mode, deep inside fit."""
    dm = make(data_dir, batch_size=1)
    dm.adapt_to(torch.nn.Linear(4, 2))
    dm.train_dataloader()  # no BatchNorm: one bag a batch is fine
    dm.adapt_to(BagMLP(10, bag_size=3, image_size=28))
    with pytest.raises(
        ConfigError, match=r"data.batch_size=1: .*BatchNorm.*\(set data.batch_size=2 or more\)"
    ):
        dm.train_dataloader()


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"bag_size": 0}, r"data.bag_size=0 must be a whole number >= 1"),
        ({"batch_size": 0}, r"data.batch_size=0 must be a whole number >= 1"),
        (
            {"variable": True, "bag_size": 2, "min_bag_size": 3},
            "min_bag_size=3 is larger than data.bag_size=2",
        ),
        ({"val_fraction": 1.5}, "val_fraction=1.5 must be a number > 0 and < 1"),
        ({"label_rule": "max"}, "data.label_rule='max' must be 'largest' or 'parity'"),
        # wrong types used to stop with a bare TypeError / ValueError naming no setting
        ({"val_fraction": "abc"}, r"data.val_fraction='abc' must be a number > 0 and < 1"),
        (
            {"eval_bag_sizes": "abc"},
            r"data.eval_bag_sizes='abc' must be a non-empty list, each item a whole",
        ),
        ({"eval_variable_max": "abc"}, r"data.eval_variable_max='abc' must be a whole number >= 0"),
        ({"num_workers": -1}, r"data.num_workers=-1 must be a whole number >= 0"),  # failed in fit
        ({"shift": -1}, r"data.shift=-1 must be a whole number >= 0 \(set data.shift=\.\.\.\)"),
        ({"on_device": "yes"}, r"data.on_device='yes' must be 'auto' or true or false"),
        ({"on_device": True, "num_workers": 2}, r"data.on_device=true .*data.num_workers=0"),
    ],
)
def test_invalid_settings(tmp_path, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        BagMNISTDataModule(str(tmp_path), **kwargs)


def test_first_epoch_bags_are_the_recorded_stream(data_dir):
    """The recorded runs (num_workers=0) trained epoch 0 on consecutive draws from seed * 1000."""
    dm = make(data_dir, seed=2, num_train_bags=24)
    generator = torch.Generator().manual_seed(2000)
    for batch in train_batches(dm, 0):
        index, mask = sample_bags(8, len(dm.splits["train"][0]), 3, 3, generator)
        assert torch.equal(batch["items"], dm.splits["train"][0][index])
        assert torch.equal(batch["mask"], mask)


def test_test_sets_are_the_recorded_streams(data_dir):
    """The recorded runs' test sets: test images only (never the validation ones), the main set
    drawn from seed * 1000 + 2, each bag{n} set from its own seed * 1000 + 100 + n (so the sets
    of two sizes are independent draws), the variable set of 1..max items from seed * 1000 + 3."""
    dm = make(data_dir, seed=2, eval_bag_sizes=[1, 2], eval_variable_max=4, num_eval_bags=10)
    images = dm.splits["test"][0]
    expected = [(3, 3, 2002), (1, 1, 2101), (2, 2, 2102), (1, 4, 2003)]
    for loader, (low, high, seed) in zip(dm.test_dataloader(), expected, strict=True):
        index, mask = sample_bags(10, len(images), low, high, torch.Generator().manual_seed(seed))
        assert torch.equal(torch.cat([b["items"] for b in loader]), images[index])
        assert torch.equal(torch.cat([b["mask"] for b in loader]), mask)


def test_workers_draw_different_bags(data_dir):
    # every worker used to copy one generator, so consecutive batches came in identical pairs
    dm = make(data_dir, num_train_bags=32, num_workers=2)
    items = [b["items"] for b in train_batches(dm, 0)]
    assert len(items) == 4
    assert all(not torch.equal(a, b) for i, a in enumerate(items) for b in items[i + 1 :])
    # the draws do not depend on the number of workers
    solo = train_batches(make(data_dir, num_train_bags=32), 0)
    assert all(torch.equal(a, b["items"]) for a, b in zip(items, solo, strict=True))


def test_epoch_bags_depend_on_seed_and_epoch_only(data_dir):
    """A resumed run draws epoch k's bags as the uninterrupted run did."""
    uninterrupted = make(data_dir, num_train_bags=16)
    epochs = [[b["items"] for b in train_batches(uninterrupted, e)] for e in range(3)]
    assert not torch.equal(epochs[0][0], epochs[1][0])  # a new draw every epoch
    resumed = [b["items"] for b in train_batches(make(data_dir, num_train_bags=16), 2)]
    assert all(torch.equal(a, b) for a, b in zip(resumed, epochs[2], strict=True))


class RecordBags(pl.LightningModule):
    """Records each epoch's training bags; trains one parameter so checkpoints have something."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.seen: dict[int, list[torch.Tensor]] = {}

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        self.seen.setdefault(self.current_epoch, []).append(batch["items"].clone())
        return self.weight * batch["items"].float().mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(dm, max_epochs: int, root, ckpt_path=None) -> RecordBags:
    module = RecordBags()
    trainer = pl.Trainer(
        max_epochs=max_epochs,
        limit_val_batches=0,
        default_root_dir=root,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
    return module


def test_resumed_trainer_continues_the_bag_stream(data_dir, tmp_path):
    uninterrupted = fit(make(data_dir, num_train_bags=16), 2, tmp_path / "a")
    fit(make(data_dir, num_train_bags=16), 1, tmp_path / "b")
    (ckpt,) = (tmp_path / "b").rglob("*.ckpt")
    resumed = fit(make(data_dir, num_train_bags=16), 2, tmp_path / "c", ckpt_path=ckpt)
    assert list(resumed.seen) == [1]
    assert all(
        torch.equal(a, b) for a, b in zip(resumed.seen[1], uninterrupted.seen[1], strict=True)
    )
    assert not torch.equal(uninterrupted.seen[0][0], uninterrupted.seen[1][0])


def test_training_drops_a_last_batch_that_batchnorm_cannot_train_on(data_dir):
    dm = make(data_dir, num_train_bags=9, num_eval_bags=9)  # batch_size 8
    norm = torch.nn.BatchNorm1d(4).train()
    for batch in train_batches(dm, 0):
        norm(torch.randn(len(batch["labels"]), 4))  # a batch of 1 bag raises here
    assert [len(b["labels"]) for b in train_batches(dm, 0)] == [8]
    assert [len(b["labels"]) for b in dm.val_dataloader()] == [8, 1]  # evaluation keeps every bag
    assert [len(b["labels"]) for b in dm.test_dataloader()[0]] == [8, 1]
    with pytest.raises(
        ConfigError, match=r"7 training bags make no full batch of data.batch_size=8"
    ):
        make(data_dir, num_train_bags=7).train_dataloader()


def test_a_split_that_leaves_no_validation_image_is_refused(data_dir):
    with pytest.raises(
        ConfigError, match=r"val_fraction=0.001 of the 200 training images leaves 0"
    ):
        make(data_dir, val_fraction=0.001)


ON_GPU = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")]


def on_trainer(dm: BagMNISTDataModule, device: str) -> BagMNISTDataModule:
    """The DataModule as a single-process Trainer training on `device` holds it (what its
    loaders read of the trainer)."""
    strategy = SimpleNamespace(root_device=torch.device(device))
    dm.trainer = SimpleNamespace(
        strategy=strategy, overfit_batches=0, world_size=1, global_rank=0, lightning_module=None
    )
    return dm


@pytest.mark.parametrize(
    "on_device, workers, trained_on, drawn_on",
    [
        ("auto", 0, "cuda", "cuda"),
        ("auto", 2, "cuda", "cpu"),  # workers cannot share the GPU's tensors
        ("auto", 0, "cpu", "cpu"),
        (False, 0, "cuda", "cpu"),
        (True, 0, "cuda", "cuda"),
    ],
)
def test_where_the_bags_are_drawn(tmp_path, on_device, workers, trained_on, drawn_on):
    dm = BagMNISTDataModule(str(tmp_path), on_device=on_device, num_workers=workers)
    assert dm.data_device().type == "cpu"  # no trainer yet
    assert on_trainer(dm, trained_on).data_device().type == drawn_on


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=ON_GPU)])
@pytest.mark.parametrize("rule", ["largest", "parity"])
def test_bags_drawn_on_the_device_are_valid(data_dir, device, rule):
    """Through the device path (on the CPU: the same code, the CPU's generator): every item is a
    training image, the labels follow the rule, and the bags are the same for the same seed."""
    dm = on_trainer(make(data_dir, on_device=True, label_rule=rule, num_train_bags=32), device)
    again = on_trainer(make(data_dir, on_device=True, label_rule=rule, num_train_bags=32), device)
    images, labels = dm.splits["train"]
    batches = train_batches(dm, 0)
    assert len(batches) == 4
    for batch, same in zip(batches, train_batches(again, 0), strict=True):
        assert all(value.device.type == device for value in batch.values())
        assert all(torch.equal(batch[key], same[key]) for key in batch)
        items = batch["items"].cpu().flatten(2)  # (B, T, S*S)
        found = (items[:, :, None, :] == images.flatten(1)[None, None]).all(-1)  # (B, T, N)
        assert found.any(-1).all(), "an item that is no training image"
        index = found.int().argmax(-1)  # (B, T)
        mask = batch["mask"].cpu()
        assert torch.equal(batch["labels"].cpu(), bag_labels(labels, index, mask, rule))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=ON_GPU)])
def test_evaluation_bags_on_the_device_are_the_hosts(data_dir, device):
    """Validation and test bags are drawn from their seed on the CPU wherever they are used: the
    same bags on the device as on the host, every pass."""
    on_host = make(data_dir, seed=3, eval_bag_sizes=[2], num_eval_bags=12)
    on_gpu = on_trainer(make(data_dir, seed=3, eval_bag_sizes=[2], num_eval_bags=12), device)
    loaders = [on_host.val_dataloader(), *on_host.test_dataloader()]
    device_loaders = [on_gpu.val_dataloader(), *on_gpu.test_dataloader()]
    for host, there in zip(loaders, device_loaders, strict=True):
        for _ in range(2):
            for a, b in zip(host, there, strict=True):
                assert b["items"].device.type == device
                assert all(torch.equal(a[key], b[key].cpu()) for key in a)


def test_ground_truth_sets_are_the_test_bags_with_each_digit(data_dir):
    dm = make(data_dir, eval_variable_max=4)
    sets = dm.ground_truth_sets()
    assert set(sets) == {"test", "variable"}
    main, variable = dm.test_dataloader()[0], dm.test_dataloader()[-1]
    for name, plain in (("test", main), ("variable", variable)):
        known, bags = first(sets[name]), first(plain)
        assert torch.equal(known["items"], bags["items"]) and torch.equal(
            known["mask"], bags["mask"]
        )
        # the label is the largest digit: the largest real item label
        digits = known["item_labels"].masked_fill(~known["mask"], -1)
        assert torch.equal(digits.amax(dim=1), known["labels"])
    assert "item_labels" not in first(main)  # the run's own batches are unchanged
