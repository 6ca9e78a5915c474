import gzip
import logging

import numpy as np
import pytest
import torch
from mnist_data import FILES, idx_bytes, write_mnist

from attnexp.data.mnist import load_mnist, read_idx
from attnexp.errors import ConfigError


def test_read_idx_roundtrip(tmp_path):
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(idx_bytes(array)))
    assert np.array_equal(read_idx(path, 3), array)


def test_load_local(tmp_path):
    write_mnist(tmp_path, num_train=20, num_test=10)
    splits, source = load_mnist(tmp_path, "auto")
    assert source == "local"
    images, labels = splits["train"]
    assert images.shape == (20, 28, 28) and images.dtype == torch.uint8
    assert labels.dtype == torch.int64 and labels.tolist() == [i % 10 for i in range(20)]
    assert splits["test"][0].shape == (10, 28, 28)


def test_missing_file(tmp_path):
    folder = write_mnist(tmp_path, 20, 10)
    (folder / FILES["test"][1]).unlink()
    with pytest.raises(ConfigError, match=r"missing t10k-labels-idx1-ubyte.gz in .*mnist"):
        load_mnist(tmp_path)


@pytest.mark.parametrize(
    "content,match",
    [
        (b"not gzip at all", "not a readable gzip IDX file"),
        (
            gzip.compress(idx_bytes(np.zeros((4, 28, 28), np.uint8)))[:-12],
            "not a readable gzip IDX file",
        ),
        (gzip.compress(b"\x00\x00\x09\x03" + b"\x00" * 20), "bad IDX header"),
        (gzip.compress(idx_bytes(np.zeros((4, 28, 28), np.uint8))[:-5]), "truncated"),
        # numpy's "offset must be non-negative and no greater than buffer length (6)"
        (gzip.compress(b"\x00\x00\x08\x03\x00\x00"), r"cut short in its IDX header \(6 of 16"),
        (  # was "truncated"
            gzip.compress(idx_bytes(np.zeros((4, 28, 28), np.uint8)) + b"\x00" * 7),
            r"longer than its header says \(3143 bytes of data, header says \(4, 28, 28\)\)",
        ),
        # a labels file in the images' place: one dimension, not three
        (
            gzip.compress(idx_bytes(np.zeros(20, np.uint8))),
            r"bad IDX header \(magic 0x00000801, want 0x00000803\)",
        ),
        # 20x20 images trained, then the test stopped with "mat1 and mat2 shapes cannot be multiplied"
        (
            gzip.compress(idx_bytes(np.zeros((20, 20, 20), np.uint8))),
            r"train-images-idx3-ubyte.gz: images of 20x20 pixels; MNIST's are 28x28",
        ),
    ],
)
def test_corrupt_file(tmp_path, content, match):
    folder = write_mnist(tmp_path, 20, 10)
    (folder / FILES["train"][0]).write_bytes(content)
    with pytest.raises(ConfigError, match=match):
        load_mnist(tmp_path)


def test_labels_that_are_not_digits(tmp_path):
    """Labels 10, 11 used to pass the reader and stop training with `IndexError: Target 11`."""
    folder = write_mnist(tmp_path, 20, 10)
    (folder / FILES["train"][1]).write_bytes(gzip.compress(idx_bytes(np.arange(20) % 12)))
    with pytest.raises(
        ConfigError, match=r"train-labels-idx1-ubyte.gz: label 10 at index 10 is not"
    ):
        load_mnist(tmp_path)


def test_image_label_count_mismatch(tmp_path):
    folder = write_mnist(tmp_path, 20, 10)
    (folder / FILES["train"][1]).write_bytes(gzip.compress(idx_bytes(np.zeros(19, np.uint8))))
    with pytest.raises(ConfigError, match="20 images but 19 labels"):
        load_mnist(tmp_path)


def test_sources(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        splits, source = load_mnist(tmp_path / "nowhere", "auto")  # offline in tests
    assert source == "sample" and "SAMPLE" in caplog.text
    assert splits["train"][0].shape[1:] == (28, 28) and len(splits["train"][0]) >= 1000
    assert all(labels.dtype == torch.int64 for _, labels in splits.values())  # as cross_entropy's
    with pytest.raises(ConfigError, match="does not exist"):
        load_mnist(tmp_path / "nowhere", "local")
    with pytest.raises(
        ConfigError, match=r"data.source 'disk' is not one of auto, local, hub, sample"
    ):
        load_mnist(tmp_path, "disk")
