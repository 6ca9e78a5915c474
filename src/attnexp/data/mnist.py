"""MNIST as uint8 tensors, from IDX files, the HF hub or the embedded sample."""

import gzip
import logging
from pathlib import Path

import numpy as np
import torch

from attnexp.data.sources import resolve, sample_path
from attnexp.errors import ConfigError

log = logging.getLogger(__name__)

IDX_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
HUB_NAME = "ylecun/mnist"
SAMPLE_FILE = "mnist_sample.npz"
IMAGE_SIZE = 28  # pixels per side, every source

Split = tuple[torch.Tensor, torch.Tensor]  # images (N, S, S) uint8, labels (N,) int64


def read_idx(path: Path, expected_ndim: int) -> np.ndarray:
    """Parse one gzipped IDX file (magic 0x0000080N, N dims, big-endian sizes, uint8 data)."""
    try:
        with gzip.open(path) as file:
            raw = file.read()
    except (OSError, EOFError) as err:
        raise ConfigError(
            f"{path} is not a readable gzip IDX file ({err}); re-download it"
        ) from err
    magic = int.from_bytes(raw[:4], "big")
    ndim = magic & 0xFF
    if magic >> 8 != 0x08 or ndim != expected_ndim:
        raise ConfigError(
            f"{path}: bad IDX header (magic {magic:#010x}, want {0x800 + expected_ndim:#010x})"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ConfigError(
            f"{path}: cut short in its IDX header ({len(raw)} of {header} bytes); re-download it"
        )
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    body = np.frombuffer(raw, dtype=np.uint8, offset=header)
    if body.size != int(np.prod(shape)):
        what = "truncated" if body.size < int(np.prod(shape)) else "longer than its header says"
        raise ConfigError(
            f"{path}: {what} ({body.size} bytes of data, header says {shape}); re-download it"
        )
    return body.reshape(shape)


def load_local(folder: Path) -> dict[str, Split]:
    missing = [
        name for pair in IDX_FILES.values() for name in pair if not (folder / name).is_file()
    ]
    if missing:
        raise ConfigError(
            f"MNIST: missing {', '.join(missing)} in {folder} (the four standard *-ubyte.gz files "
            f"go there; or remove the folder to use the hub/sample)"
        )
    splits = {}
    for split, (images_file, labels_file) in IDX_FILES.items():
        images = read_idx(folder / images_file, 3)
        labels = read_idx(folder / labels_file, 1)
        if len(images) != len(labels):
            raise ConfigError(
                f"MNIST {split}: {len(images)} images but {len(labels)} labels in {folder}"
            )
        if images.shape[1:] != (IMAGE_SIZE, IMAGE_SIZE):
            raise ConfigError(
                f"{folder / images_file}: images of {images.shape[1]}x{images.shape[2]} pixels; "
                f"MNIST's are {IMAGE_SIZE}x{IMAGE_SIZE}, which the bag models are built for (give "
                f"the standard files)"
            )
        bad = np.flatnonzero(labels > 9)
        if bad.size:
            raise ConfigError(
                f"{folder / labels_file}: label {int(labels[bad[0]])} at index {int(bad[0])} is "
                f"not a digit 0-9 ({bad.size} such labels): not an MNIST labels file (re-download it)"
            )
        splits[split] = (torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64)))
    return splits


def load_hub() -> dict[str, Split]:
    from datasets import load_dataset

    ds = load_dataset(HUB_NAME)
    splits = {}
    for split in ("train", "test"):
        images = np.stack([np.asarray(img, dtype=np.uint8) for img in ds[split]["image"]])
        splits[split] = (
            torch.from_numpy(images),
            torch.tensor(ds[split]["label"], dtype=torch.int64),
        )
    return splits


def load_sample() -> dict[str, Split]:
    with np.load(sample_path(SAMPLE_FILE)) as arrays:
        return {
            split: (
                torch.from_numpy(arrays[f"{split}_images"]),
                torch.from_numpy(arrays[f"{split}_labels"]).long(),
            )
            for split in ("train", "test")
        }


def load_mnist(data_dir: str | Path, source: str = "auto") -> tuple[dict[str, Split], str]:
    """Returns ({"train": split, "test": split}, source used)."""
    return resolve("MNIST", source, Path(data_dir) / "mnist", load_local, load_hub, load_sample)
