import pytest
import torch
from mnist_data import write_mnist

from attnexp.data.bag_mnist import BagMNISTDataModule
from attnexp.errors import ConfigError


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("data")
    write_mnist(path, num_train=200, num_test=60)
    return path


def make(data_dir, **kwargs):
    dm = BagMNISTDataModule(str(data_dir), batch_size=8, **kwargs)
    dm.setup("fit")
    return dm


def first(loader):
    return next(iter(loader))


def test_splits_loaders_and_eval_sets(data_dir):
    dm = make(data_dir, eval_bag_sizes=[1, 5], eval_variable_max=4)
    assert dm.source == "local"
    assert len(dm.splits["train"][0]) == 180 and len(dm.splits["val"][0]) == 20
    assert len(dm.train_dataloader().dataset) == 180  # one training bag per training image
    assert dm.test_set_names == ["bag1", "bag5", "variable"]
    tests = dm.test_dataloader()
    assert [first(t)["items"].shape[1] for t in tests] == [3, 1, 5, 4]
    batch = dm.on_after_batch_transfer(first(tests[-1]), 0)
    assert batch["items"].shape[2:] == (1, 28, 28) and batch["items"].dtype == torch.float32
    assert (batch["items"][~batch["mask"]] == 0).all()  # padded slots are zero after normalising


def test_val_and_test_bags_fixed_per_seed_train_bags_resampled(data_dir):
    a, b = make(data_dir), make(data_dir)
    assert torch.equal(first(a.val_dataloader())["items"], first(b.val_dataloader())["items"])
    assert torch.equal(
        first(a.test_dataloader()[0])["labels"], first(b.test_dataloader()[0])["labels"]
    )
    assert torch.equal(first(a.val_dataloader())["items"], first(a.val_dataloader())["items"])
    train = a.train_dataloader()
    assert not torch.equal(first(train)["items"], first(train)["items"])
    c = make(data_dir, seed=1)
    assert not torch.equal(first(a.val_dataloader())["items"], first(c.val_dataloader())["items"])


def test_variable_training_bags(data_dir):
    dm = make(data_dir, variable=True, bag_size=5, min_bag_size=2)
    sizes = torch.cat([b["mask"].sum(1) for b in dm.train_dataloader()])
    assert sizes.min() >= 2 and sizes.max() <= 5 and len(set(sizes.tolist())) > 1


def test_adapt_to_a_model_with_a_size_limit(data_dir):
    dm = make(data_dir, eval_bag_sizes=[1, 3, 4], eval_variable_max=6)
    dm.adapt_to(type("M", (), {"max_bag_size": 3})())
    assert dm.eval_bag_sizes == [1, 3] and dm.eval_variable_max == 0
    assert dm.test_set_names == ["bag1", "bag3"]


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"bag_size": 0}, r"data.bag_size=0 must be >= 1"),
        ({"batch_size": 0}, r"data.batch_size=0 must be >= 1"),
        (
            {"variable": True, "bag_size": 2, "min_bag_size": 3},
            "min_bag_size=3 is larger than data.bag_size=2",
        ),
        ({"val_fraction": 1.5}, "val_fraction=1.5 must be between 0 and 1"),
        ({"label_rule": "max"}, "label rule 'max' is not one of largest, parity"),
    ],
)
def test_invalid_settings(tmp_path, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        BagMNISTDataModule(str(tmp_path), **kwargs)
