"""Which source a DataModule reads, decided before it loads anything."""

import pytest

from attnexp.data.bag_mnist import BagMNISTDataModule
from attnexp.data.imdb import IMDBDataModule
from attnexp.data.lcqmc import LCQMCDataModule
from attnexp.data.sources import planned
from attnexp.errors import ConfigError


@pytest.mark.parametrize(
    "source, folder, online, expected",
    [
        ("auto", True, False, "local"),
        ("auto", False, True, "hub"),
        ("auto", False, False, "sample"),
        ("local", False, False, "local"),  # resolve then names the missing folder
        ("hub", True, False, "hub"),
        ("sample", True, True, "sample"),
    ],
)
def test_planned_source(tmp_path, monkeypatch, source, folder, online, expected):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0" if online else "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0" if online else "1")
    if folder:
        (tmp_path / "data").mkdir()
    assert planned(source, tmp_path / "data", has_hub=True, has_sample=True) == expected


def test_planned_source_without_a_sample_or_hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert planned("auto", tmp_path / "none", has_hub=True, has_sample=False) is None
    assert planned("hub", tmp_path / "none", has_hub=False, has_sample=True) is None
    with pytest.raises(ConfigError, match="data.source 'disk' is not one of auto, local"):
        planned("disk", tmp_path, has_hub=True, has_sample=True)


@pytest.mark.parametrize(
    "cls, subdir",
    [(BagMNISTDataModule, "mnist"), (IMDBDataModule, "imdb"), (LCQMCDataModule, "lcqmc")],
)
def test_datamodules_plan_their_own_folder(tmp_path, monkeypatch, cls, subdir):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datamodule = cls(data_dir=str(tmp_path))
    assert datamodule.planned_source() == ("sample" if datamodule.has_sample else None)
    (tmp_path / subdir).mkdir()
    assert datamodule.planned_source() == "local"
    assert datamodule.source is None  # nothing was loaded
