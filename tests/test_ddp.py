"""trainer=ddp_cpu: 2 gloo processes per job, one run dir and one metrics.json per job; data split by rank."""

import json
from types import SimpleNamespace

import torch
from cli_helpers import TINY, run_cli
from pytorch_lightning.trainer.connectors.data_connector import _get_distributed_sampler
from pytorch_lightning.trainer.states import RunningStage
from pytorch_lightning.utilities.data import _update_dataloader

from attnexp.data.bag_mnist import BagMNISTDataModule


def rank_loaders(make_loader, stage: RunningStage, shuffle: bool):
    """The loader each of 2 ranks gets after Lightning injects its distributed sampler."""
    loaders = []
    for rank in (0, 1):
        loader = make_loader(rank)
        sampler = _get_distributed_sampler(
            loader, shuffle=shuffle, overfit_batches=0, mode=stage, num_replicas=2, rank=rank
        )
        loaders.append(_update_dataloader(loader, sampler, mode=stage))
    return loaders


def datamodule(tmp_path, rank: int) -> BagMNISTDataModule:
    dm = BagMNISTDataModule(
        str(tmp_path),
        source="sample",
        batch_size=8,
        num_eval_bags=40,
        num_train_bags=40,
        eval_bag_sizes=[2],
        eval_variable_max=0,
    )
    dm.trainer = SimpleNamespace(global_rank=rank)
    dm.setup("fit")
    return dm


def test_ranks_get_disjoint_eval_batches_and_different_train_bags(tmp_path):
    val = rank_loaders(
        lambda r: datamodule(tmp_path, r).val_dataloader(), RunningStage.VALIDATING, False
    )
    batches = [[b["labels"] for b in loader] for loader in val]
    # 40 bags in 5 batches of 8: rank 0 gets batches 0, 2, 4; rank 1 gets 1, 3 and (padding) 0 again
    assert [len(b) for b in batches] == [3, 3]
    single = [b["labels"] for b in datamodule(tmp_path, 0).val_dataloader()]
    assert [t.tolist() for t in batches[0]] == [single[i].tolist() for i in (0, 2, 4)]
    assert [t.tolist() for t in batches[1]] == [single[i].tolist() for i in (1, 3, 0)]

    train = rank_loaders(
        lambda r: datamodule(tmp_path, r).train_dataloader(), RunningStage.TRAINING, True
    )
    first = [next(iter(loader)) for loader in train]
    assert len(train[0]) == len(train[1]) == 3  # same number of steps on every rank (no DDP hang)
    assert not torch.equal(first[0]["items"], first[1]["items"])  # each rank draws its own bags
    # rank 0 keeps the single-process stream: same seed, same bags as a run on one device
    solo = next(iter(datamodule(tmp_path, 0).train_dataloader()))
    assert torch.equal(first[0]["items"], solo["items"])


def test_ddp_cpu_multirun_one_run_dir_per_job(tmp_path):
    result = run_cli(
        tmp_path,
        "-m",
        *TINY,
        "trainer=ddp_cpu",
        "model.hidden_size=8,16",
        "callbacks.attention_figures=null",
        "data.eval_variable_max=0",
        "data.eval_bag_sizes=[2]",
        timeout=400,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    outputs = tmp_path / "outputs"
    (sweep_dir,) = (outputs / "multiruns").iterdir()
    jobs = sorted(p for p in sweep_dir.iterdir() if p.is_dir())
    assert [p.name for p in jobs] == ["0_model.hidden_size=8", "1_model.hidden_size=16"]
    assert not (outputs / "runs").exists()  # the spawned workers started no Hydra runs of their own
    assert sorted(p.relative_to(sweep_dir).as_posix() for p in sweep_dir.rglob("metrics.json")) == [
        f"{p.name}/metrics.json" for p in jobs
    ]
    for job in jobs:
        record = json.loads((job / "metrics.json").read_text())
        assert record["status"] == "completed", record.get("error")
        assert record["device"] == "cpu x2"
        metrics = record["metrics"]
        assert 0 <= metrics["test/acc"] <= 1 and 0 <= metrics["val/acc_best"] <= 1
        assert {"test/acc_bag2", "val/loss", "test/loss"} <= set(metrics)
        # rank 0's epoch record reached the file, and the main process kept it
        assert [h["epoch"] for h in record["history"]] == [0]
        assert record["history"][0]["val/acc"] == metrics["val/acc"]
        assert len(list((job / "checkpoints").glob("*.ckpt"))) == 2  # best and last, once
        assert len(list(job.rglob("hparams.yaml"))) == 1
