"""Tiny generated MNIST-style IDX files (random pixels, no real digits) for the bag tests."""

import gzip
from pathlib import Path

import numpy as np

FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


def idx_bytes(array: np.ndarray) -> bytes:
    """IDX: magic 0x0000080N (uint8 data, N dims), N big-endian int32 sizes, then the data."""
    header = (0x800 + array.ndim).to_bytes(4, "big") + b"".join(
        n.to_bytes(4, "big") for n in array.shape
    )
    return header + array.astype(np.uint8).tobytes()


def write_mnist(data_dir: Path, num_train: int = 240, num_test: int = 120, seed: int = 0) -> Path:
    """<data_dir>/mnist/ with the four *-ubyte.gz files; labels cycle 0..9, images are noise."""
    rng = np.random.default_rng(seed)
    folder = Path(data_dir) / "mnist"
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", num_train), ("test", num_test)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = np.arange(n) % 10
        for name, array in zip(FILES[split], (images, labels), strict=True):
            (folder / name).write_bytes(gzip.compress(idx_bytes(array)))
    return folder
