"""Which source a DataModule reads, decided before it loads anything; what the hub loaders read."""

import logging

import datasets
import pytest
import torch
from imdb_data import write_imdb
from lcqmc_data import write_lcqmc
from mnist_data import write_mnist
from PIL import Image

from attnexp.data.bag_mnist import BagMNISTDataModule
from attnexp.data.imdb import IMDBDataModule
from attnexp.data.lcqmc import HUB_COLUMNS, HUB_SPLITS, LCQMCDataModule
from attnexp.data.mnist import load_mnist
from attnexp.data.sources import planned, resolve
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


def test_datasets_offline_alone_keeps_auto_off_the_hub(tmp_path, monkeypatch):
    """HF_DATASETS_OFFLINE=1 without HF_HUB_OFFLINE: datasets will not reach the hub, so auto
    must plan the sample, not a hub load that fails."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert planned("auto", tmp_path / "none", has_hub=True, has_sample=True) == "sample"


def test_planned_source_without_a_sample_or_hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert planned("auto", tmp_path / "none", has_hub=True, has_sample=False) is None
    assert planned("hub", tmp_path / "none", has_hub=False, has_sample=True) is None
    with pytest.raises(ConfigError, match="data.source 'disk' is not one of auto, local"):
        planned("disk", tmp_path, has_hub=True, has_sample=True)


def test_resolve_warns_whenever_auto_leaves_the_local_files(tmp_path, monkeypatch, caplog):
    """Under source=auto the hub and the sample are fallbacks: each is said at WARNING; a source
    asked for by name is not."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")

    def failing_hub():
        raise ConnectionError("no route to huggingface.co")

    def resolved(source, load_hub):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="attnexp.data.sources"):
            found = resolve("toy", source, tmp_path / "toy", None, load_hub, lambda: "sample rows")
        return found, [r.getMessage() for r in caplog.records]

    found, warned = resolved("auto", lambda: "hub rows")
    assert found == ("hub rows", "hub")
    assert (
        len(warned) == 1 and "from the HF hub" in warned[0] and str(tmp_path / "toy") in warned[0]
    )
    assert resolved("hub", lambda: "hub rows") == (("hub rows", "hub"), [])
    found, warned = resolved("auto", failing_hub)
    assert found == ("sample rows", "sample")
    assert len(warned) == 3 and "from the HF hub" in warned[0]
    assert "the HF hub failed (no route to huggingface.co)" in warned[1]
    assert "embedded SAMPLE" in warned[2]


def test_resolve_refusals_name_the_folder_and_the_cause(tmp_path, monkeypatch):
    """A source asked for by name either loads or says why, never falls back to the sample."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    folder = tmp_path / "toy"

    def failing_hub():
        raise ConnectionError("no route to huggingface.co")

    def sample():
        return "sample rows"

    with pytest.raises(ConfigError, match=r"data folder .*toy does not exist.*holding toy/>"):
        resolve("toy", "local", folder, lambda path: "local rows", None, sample)
    with pytest.raises(ConfigError, match="hub: no route to huggingface.co"):
        resolve("toy", "hub", folder, lambda path: "local rows", failing_hub, sample)
    with pytest.raises(ConfigError, match="toy: no data found"):  # a dataset with no hub loader
        resolve("toy", "hub", folder, lambda path: "local rows", None, sample)


@pytest.mark.parametrize(
    "value, online",
    [
        ("0", True),
        ("", True),
        ("false", True),
        ("False", True),
        ("no", True),
        ("off", True),
        ("1", False),
        ("TRUE", False),
        ("yes", False),
    ],
)
def test_hub_offline_reads_the_variable_as_huggingface_does(tmp_path, monkeypatch, value, online):
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    expected = "hub" if online else "sample"
    assert planned("auto", tmp_path / "none", has_hub=True, has_sample=True) == expected


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


# --- the hub loaders, on datasets in the hub's schema (load_dataset is replaced: no network) -------
# Each reads the same generated data as the local loader does, so the two must agree.


def serve_hub(monkeypatch, name: str, hub: datasets.DatasetDict) -> list:
    """datasets.load_dataset(name[, split]) serves `hub`; returns the splits asked for."""
    asked = []

    def load_dataset(path, split=None, **kwargs):
        assert path == name
        asked.append(split)
        return hub if split is None else hub[split]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return asked


def test_mnist_from_the_hub_equals_the_idx_files(tmp_path, monkeypatch):
    local, _ = load_mnist(write_mnist(tmp_path / "data", num_train=30, num_test=20).parent)
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(10)})
    hub = datasets.DatasetDict(
        {
            split: datasets.Dataset.from_dict(
                {"image": [Image.fromarray(x.numpy()) for x in images], "label": labels.tolist()},
                features=features,
            )
            for split, (images, labels) in local.items()
        }
    )
    serve_hub(monkeypatch, "ylecun/mnist", hub)
    from_hub, source = load_mnist(tmp_path / "nowhere", "hub")
    assert source == "hub"
    for split, (images, labels) in local.items():
        assert from_hub[split][0].dtype == torch.uint8
        assert torch.equal(from_hub[split][0], images) and torch.equal(from_hub[split][1], labels)


def test_imdb_from_the_hub_equals_the_parquet_files(tmp_path, monkeypatch):
    folder = write_imdb(tmp_path / "data", num_train=40, num_test=20)
    dm = IMDBDataModule(str(tmp_path / "nowhere"), source="hub", cache_dir=str(tmp_path / "c"))
    local = dm.load_local(folder)
    features = datasets.Features(
        {"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])}
    )
    splits = {s: datasets.Dataset.from_dict(local[s], features=features) for s in local}
    unlabelled = {"text": ["no label here"], "label": [-1]}  # the hub's third split
    splits["unsupervised"] = datasets.Dataset.from_dict(unlabelled, features=features)
    serve_hub(monkeypatch, "stanfordnlp/imdb", datasets.DatasetDict(splits))
    from_hub = dm.load_hub()
    assert from_hub == local and all(type(v) is list for s in from_hub.values() for v in s.values())
    dm.setup("fit")
    assert dm.source == "hub"


def test_lcqmc_from_the_hub_equals_the_tsv_files(tmp_path, monkeypatch):
    folder = write_lcqmc(tmp_path / "data", {"train": 20, "dev": 10, "test": 10})
    dm = LCQMCDataModule(str(tmp_path / "nowhere"), source="hub")
    local = dm.load_local(folder)
    hub = datasets.DatasetDict(
        {
            HUB_SPLITS[split]: datasets.Dataset.from_dict(
                dict(zip(HUB_COLUMNS, pairs, strict=True))
            )
            for split, pairs in local.items()
        }
    )
    asked = serve_hub(monkeypatch, "C-MTEB/LCQMC", hub)
    assert dm.load_hub() == local
    assert asked == ["train", "validation", "test"]
