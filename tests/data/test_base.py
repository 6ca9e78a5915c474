import pytest
import torch

from attnexp.data.base import changed_splits, data_hash, fingerprint


def test_fingerprints_tell_splits_apart_by_content_only():
    texts, labels = ["a good film", "a bad one"], [1, 0]
    assert fingerprint(texts, labels) == fingerprint(list(texts), tuple(labels))
    assert fingerprint(texts, labels) != fingerprint(texts, [0, 1])  # labels flipped
    assert fingerprint(texts, labels) != fingerprint(["a good film", "a bad one!"], labels)
    assert fingerprint(["ab"], ["c"]) != fingerprint(["a"], ["bc"])
    assert fingerprint(["a", "b"], []) != fingerprint(["a"], ["b"])  # where one part ends
    images = torch.zeros(3, 4, 4, dtype=torch.uint8)
    changed = images.clone()
    changed[1, 2, 3] = 1
    assert fingerprint(images, torch.arange(3)) != fingerprint(changed, torch.arange(3))
    assert fingerprint(images[:, :2].transpose(1, 2), torch.arange(3))  # any layout hashes


def test_data_hash_and_changed_splits():
    """The report averages runs with one data_hash only, and evaluate warns about changed splits:
    a split's order of reading must not count, its name must, and a split never recorded is
    unknown, not changed."""
    train, test = {"text": ["a"], "label": [1]}, {"text": ["b"], "label": [0]}
    assert data_hash({"train": train, "test": test}) == data_hash({"test": test, "train": train})
    assert data_hash({"dev": test}) != data_hash({"test": test})  # the same pairs, another split
    now = {"train": "1", "val": "2", "test": "3"}
    assert changed_splits({"train": "1", "val": "9"}, now) == ["val"]
    assert changed_splits(None, now) == []


def test_batching_keys_are_checked_from_the_schema_and_unknown_ones_named(tmp_path):
    from attnexp.data.bag_mnist import BagMNISTDataModule
    from attnexp.data.base import BucketBatching
    from attnexp.data.imdb import IMDBDataModule
    from attnexp.errors import ConfigError

    with pytest.raises(ConfigError, match=r"data.pool_batches=0 must be a whole number >= 1"):
        IMDBDataModule(str(tmp_path), pool_batches=0)
    # A key no constructor of the class names: refused with the nearest one and every setting.
    with pytest.raises(ConfigError, match=r"data.pool_batch: .*did you mean data.pool_batches\?"):
        IMDBDataModule(str(tmp_path), pool_batch=5)
    with pytest.raises(ConfigError, match=r"data.pool_batches: .*it takes: .*bag_size.*seed"):
        BagMNISTDataModule(str(tmp_path), pool_batches=5)  # bags are not length-bucketed
    assert BucketBatching(batch_size=8).size(train=False) == 8  # no eval_batch_size: batch_size
    assert BucketBatching(batch_size=8, eval_batch_size=32).size(train=False) == 32
