"""Text batches in page-locked memory when the trainer trains on CUDA (so Lightning's non_blocking
copy is asynchronous), and the loaders exactly as before on the CPU."""

from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
from imdb_data import write_imdb
from lcqmc_data import write_lcqmc

from attnexp.data.imdb import IMDBDataModule
from attnexp.data.lcqmc import LCQMCDataModule


def imdb(tmp_path) -> IMDBDataModule:
    write_imdb(tmp_path / "data", num_train=40, num_test=16)
    dm = IMDBDataModule(
        str(tmp_path / "data"), cache_dir=str(tmp_path / "cache"), vocab_size=200,
        min_frequency=1, max_seq_len=20, batch_size=8, pool_batches=2,
    )  # fmt: skip
    dm.setup("fit")
    return dm


def lcqmc(tmp_path) -> LCQMCDataModule:
    write_lcqmc(tmp_path / "data", {"dev": 40, "test": 16})
    dm = LCQMCDataModule(str(tmp_path / "data"), train_split="dev", batch_size=8, cache_dir=None)
    dm.setup()
    return dm


def trained_on(device: str) -> SimpleNamespace:
    """What the DataModule reads of its trainer: the strategy's root device."""
    return SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device(device)))


def loaders(dm) -> list:
    return [dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()]


@pytest.mark.parametrize("make_dm", [imdb, lcqmc])
def test_text_loaders_pin_only_for_a_cuda_trainer(tmp_path, make_dm):
    dm = make_dm(tmp_path)
    assert [loader.pin_memory for loader in loaders(dm)] == [False] * 3  # no trainer
    dm.trainer = trained_on("cpu")
    assert [loader.pin_memory for loader in loaders(dm)] == [False] * 3
    dm.trainer = pl.Trainer(accelerator="cpu", logger=False)  # the real one reads alike
    assert not dm.pins_memory()
    dm.trainer = trained_on("cuda")
    assert [loader.pin_memory for loader in loaders(dm)] == [True] * 3


@pytest.mark.parametrize("make_dm", [imdb, lcqmc])
def test_cpu_batches_are_unchanged(tmp_path, make_dm):
    """The CPU trainer's batches are those of a loader built without a trainer."""
    dm = make_dm(tmp_path)
    alone = list(dm.train_dataloader())
    dm.trainer = trained_on("cpu")
    for batch, again in zip(alone, dm.train_dataloader(), strict=True):
        assert batch.keys() == again.keys()
        assert all(torch.equal(batch[key], again[key]) for key in batch)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")
@pytest.mark.parametrize("make_dm", [imdb, lcqmc])
def test_cuda_batches_come_pinned_and_copy_unchanged(tmp_path, make_dm):
    dm = make_dm(tmp_path)
    plain = next(iter(dm.train_dataloader()))
    dm.trainer = pl.Trainer(accelerator="cuda", devices=1, logger=False)
    pinned = next(iter(dm.train_dataloader()))
    assert all(tensor.is_pinned() for tensor in pinned.values())
    on_device = {key: value.to("cuda", non_blocking=True) for key, value in pinned.items()}
    torch.cuda.synchronize()
    assert all(torch.equal(on_device[key].cpu(), plain[key]) for key in plain)
