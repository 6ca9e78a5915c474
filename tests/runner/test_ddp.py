"""trainer=ddp_cpu: 2 gloo processes per job, one run dir and one metrics.json per job; data split by rank."""

import json
import os
from collections import Counter
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
import torch.distributed as dist
from cli_helpers import TINY, run_cli
from imdb_data import write_imdb
from lcqmc_data import write_lcqmc
from lightning_fabric.utilities.data import _replace_dunder_methods
from omegaconf import OmegaConf
from pytorch_lightning.trainer.connectors.data_connector import _get_distributed_sampler
from pytorch_lightning.trainer.states import RunningStage
from pytorch_lightning.utilities.data import _update_dataloader
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from attnexp.data.bag_mnist import BagMNISTDataModule
from attnexp.data.batching import BucketBatchSampler
from attnexp.data.imdb import IMDBDataModule
from attnexp.data.lcqmc import LCQMCDataModule
from attnexp.files import checkpoint_value
from attnexp.models import ModelOutput
from attnexp.runs.dirs import RunDirGuard
from attnexp.runs.lock import owning
from attnexp.runs.record import WORKER_KEYS, RunRecord
from attnexp.tasks import ClassificationTask
from attnexp.tasks.callbacks import EndSpawnedProcessGroup, EpochHistory
from attnexp.tasks.random_state import CHECKPOINT_KEY


def rank_loaders(make_loader, stage: RunningStage, shuffle: bool, world: int = 2, datamodule=None):
    """The loader each of `world` ranks gets, made as the Trainer makes it (`_request_dataloader`):
    inside the context that records the init arguments of loaders and batch samplers, which
    Lightning needs to re-create them; then Lightning injects its distributed sampler, unless the
    loader already has one. `datamodule`: told its rank, as the Trainer tells it."""
    loaders = []
    for rank in range(world):
        if datamodule is not None:
            datamodule.trainer = SimpleNamespace(
                world_size=world, global_rank=rank, overfit_batches=0
            )
        with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):
            loader = make_loader()
        if isinstance(loader.sampler, DistributedSampler):
            loaders.append(loader)
            continue
        sampler = _get_distributed_sampler(
            loader, shuffle=shuffle, overfit_batches=0, mode=stage, num_replicas=world, rank=rank
        )
        loaders.append(_update_dataloader(loader, sampler, mode=stage))
    return loaders


def bag_datamodule(tmp_path) -> BagMNISTDataModule:
    dm = BagMNISTDataModule(
        str(tmp_path),
        source="sample",
        batch_size=8,
        num_eval_bags=40,
        num_train_bags=40,
        eval_bag_sizes=[2],
        eval_variable_max=0,
    )
    dm.setup("fit")
    return dm


def test_ranks_get_disjoint_eval_batches_and_different_train_bags(tmp_path):
    dm = bag_datamodule(tmp_path)
    single = [b["labels"] for b in dm.val_dataloader()]  # dm.trainer is None: one device
    val = rank_loaders(dm.val_dataloader, RunningStage.VALIDATING, False, datamodule=dm)
    batches = [[b["labels"] for b in loader] for loader in val]
    # 40 bags in 5 batches of 8: rank 0 gets batches 0, 2, 4; rank 1 gets 1, 3 (none repeated to
    # even out the ranks, which would count their bags twice)
    assert [t.tolist() for t in batches[0]] == [single[i].tolist() for i in (0, 2, 4)]
    assert [t.tolist() for t in batches[1]] == [single[i].tolist() for i in (1, 3)]

    dm.trainer = None
    single = [b["items"] for b in dm.train_dataloader()]
    train = rank_loaders(dm.train_dataloader, RunningStage.TRAINING, True, datamodule=dm)
    assert len(train[0]) == len(train[1]) == 3  # same number of steps on every rank (no DDP hang)
    # both ranks draw the single-process epoch's 5 batches and share them out (one repeated)
    ranks = [[b["items"] for b in loader] for loader in train]
    position = [
        [next(i for i, s in enumerate(single) if torch.equal(b, s)) for b in r] for r in ranks
    ]
    assert sorted(position[0] + position[1])[:5] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("which", ["val", "test"])
def test_ranks_evaluate_every_bag_once(tmp_path, world, which):
    dm = BagMNISTDataModule(
        str(tmp_path), source="sample", batch_size=16, num_eval_bags=100,
        eval_bag_sizes=[2], eval_variable_max=0,
    )  # fmt: skip
    dm.setup("fit")
    make = dm.val_dataloader if which == "val" else (lambda: dm.test_dataloader()[0])
    stage = RunningStage.VALIDATING if which == "val" else RunningStage.TESTING
    single = [b["items"] for b in make()]  # dm.trainer is None: one device
    shards = [
        [b["items"] for b in loader]
        for loader in rank_loaders(make, stage, False, world=world, datamodule=dm)
    ]
    seen = [b for shard in shards for b in shard]
    assert sum(len(b) for b in seen) == sum(len(b) for b in single) == 100
    assert all(len(shard) >= 1 for shard in shards)
    for batch in single:  # each single-device batch is evaluated by exactly one rank
        assert sum(torch.equal(batch, b) for b in seen if b.shape == batch.shape) == 1


def text_datamodules(tmp_path):
    write_imdb(tmp_path / "data", num_train=41, num_test=10)
    write_lcqmc(tmp_path / "data", {"dev": 45, "test": 10})
    common = {"batch_size": 4, "cache_dir": str(tmp_path / "cache"), "seed": 3}
    imdb = IMDBDataModule(
        str(tmp_path / "data"), vocab_size=200, min_frequency=1, pool_batches=2, **common
    )
    lcqmc = LCQMCDataModule(str(tmp_path / "data"), train_split="dev", eval_batch_size=4, **common)
    return {"imdb": imdb, "lcqmc": lcqmc}


@pytest.mark.parametrize("name", ["imdb", "lcqmc"])
@pytest.mark.parametrize(
    "stage", [RunningStage.TRAINING, RunningStage.VALIDATING], ids=["train", "val"]
)
def test_text_loaders_bucket_each_ranks_shard(tmp_path, name, stage):
    dm = text_datamodules(tmp_path)[name]
    dm.setup("fit")
    training = stage == RunningStage.TRAINING
    make = dm.train_dataloader if training else dm.val_dataloader
    n = len(make().dataset)
    lengths = make().batch_sampler.lengths
    loaders = rank_loaders(make, stage, shuffle=training)
    ranks = []
    for loader in loaders:
        assert type(loader.batch_sampler) is BucketBatchSampler
        assert isinstance(loader.batch_sampler.sampler, DistributedSampler)
        batches = list(loader.batch_sampler)
        assert all(lengths[b].tolist() == sorted(lengths[b].tolist()) for b in batches)
        assert sum(len(batch["labels"]) for batch in loader) == sum(len(b) for b in batches)
        ranks.append([i for b in batches for i in b])
    assert len(loaders[0]) == len(loaders[1])  # same number of steps on every rank (no DDP hang)
    # together the ranks see every example once, plus DistributedSampler's padding to even
    padding = n % 2
    counts = Counter(ranks[0] + ranks[1])
    assert set(counts) == set(range(n)) and sum(counts.values()) == n + padding
    assert len(ranks[0]) == len(ranks[1]) == (n + padding) // 2
    assert len(set(ranks[0]) & set(ranks[1])) <= padding


@pytest.mark.parametrize("strategy", ["ddp_spawn", "ddp"])
def test_spawned_ranks_end_their_process_group(tmp_path, strategy):
    """A spawned rank exits after its stage, so it ends its group (with its peers, at a barrier);
    a rank launched by a script keeps it for the next stage."""
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy=strategy, logger=False)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        EndSpawnedProcessGroup().teardown(trainer, None, "fit")
        assert dist.is_initialized() == (strategy == "ddp")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# Two CPU processes over gloo, one small eval set: seconds per job.
DDP_TINY = [*TINY, "trainer=ddp_cpu", "data.eval_variable_max=0", "data.eval_bag_sizes=[2]"]


def test_ddp_cpu_multirun_one_run_dir_per_job(tmp_path):
    result = run_cli(
        tmp_path,
        "-m",
        *DDP_TINY,
        "model.hidden_size=8,16",
        "callbacks.attention_figures=null",
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
        # the random state of each rank, which a resume restores on that rank
        states = checkpoint_value(job / "checkpoints" / "last.ckpt", CHECKPOINT_KEY)
        assert len(states) == 2 and all(torch.is_tensor(s["torch"]) for s in states)
        assert len(list(job.rglob("hparams.yaml"))) == 1


@pytest.mark.slow  # about a minute on 2 busy cores: the spawned processes start slowly
def test_ddp_cpu_imdb_run(tmp_path):
    """Two gloo processes train the LSTM on tiny IMDB-style data, each on its own shard."""
    write_imdb(tmp_path / "data", num_train=64, num_test=32)
    result = run_cli(
        tmp_path,
        "model=lstm_attn",
        "scorer=dot",
        "data.source=local",
        f"data.cache_dir={tmp_path}/cache",
        "model.embed_dim=8",
        "model.hidden_size=8",
        "data.max_seq_len=32",
        "data.batch_size=16",
        "trainer=ddp_cpu",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "trainer.enable_progress_bar=false",
        "callbacks.attention_figures=null",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (record_path,) = (tmp_path / "outputs" / "runs").glob("*/metrics.json")
    record = json.loads(record_path.read_text())
    assert record["status"] == "completed", record.get("error")
    assert record["device"] == "cpu x2" and record["data_source"] == "local"
    assert 0 <= record["metrics"]["test/acc"] <= 1


# Ranks > 0 that Lightning's ddp/fsdp launcher re-runs into rank 0's run dir (trainer=fsdp,
# trainer.strategy=ddp) have `hydra.run.dir=<rank 0's dir>` on their command line, and that dir
# already holds rank 0's metrics.json: the guard must let them in, or rank 0 is killed.


def guard_config(run_dir, resume=None):
    return OmegaConf.create(
        {
            "resume": resume,
            "paths": {"log_dir": str(run_dir.parent)},
            "hydra": {
                "run": {"dir": str(run_dir)},
                "overrides": {"task": [], "hydra": [f'hydra.run.dir="{run_dir}"']},
            },
        }
    )


def rank0_run_dir(tmp_path):
    run_dir = tmp_path / "runs" / "r0"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "overrides.yaml").write_text("[]\n")
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"")
    record = {"status": "running", "pid": os.getpid(), "host": os.uname().nodename}
    (run_dir / "metrics.json").write_text(json.dumps(record))
    return run_dir


@pytest.mark.parametrize("resume", [False, True], ids=["new", "resume"])
def test_relaunched_rank_enters_rank0_run_dir(tmp_path, monkeypatch, resume):
    run_dir = rank0_run_dir(tmp_path)
    monkeypatch.setenv("LOCAL_RANK", "1")
    RunDirGuard().on_run_start(guard_config(run_dir, str(run_dir) if resume else None))


@pytest.mark.parametrize("key", ["LOCAL_RANK", "RANK", "SLURM_PROCID"])
def test_each_launchers_rank_variable_marks_a_relaunched_rank(tmp_path, monkeypatch, key):
    """Lightning sets LOCAL_RANK, torchrun RANK, srun SLURM_PROCID: each such rank > 0 enters
    rank 0's run dir."""
    run_dir = rank0_run_dir(tmp_path)
    for other in ("LOCAL_RANK", "RANK", "SLURM_PROCID"):
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(key, "1")
    RunDirGuard().on_run_start(guard_config(run_dir))


def test_resume_auto_checks_the_run_the_run_dir_resolver_finds(tmp_path, monkeypatch, capsys):
    """The guard looks for resume=auto's run where conf/hydra/default.yaml's resolver does,
    under paths.log_dir/runs: that run, still being written, is refused."""
    run_dir = rank0_run_dir(tmp_path)  # tmp_path/runs/r0, running: this process
    for key in ("LOCAL_RANK", "RANK", "SLURM_PROCID"):
        monkeypatch.delenv(key, raising=False)
    config = OmegaConf.create(
        {
            "resume": "auto",
            "paths": {"log_dir": str(tmp_path)},
            "hydra": {"run": {"dir": "unused"}, "overrides": {"task": [], "hydra": []}},
        }
    )
    with owning(run_dir, "train"), pytest.raises(SystemExit):  # rank 0 holds its run's lock
        RunDirGuard().on_run_start(config)
    assert f"the run in {run_dir} is still running" in capsys.readouterr().err


def test_rank0_still_refuses_a_dir_holding_a_run(tmp_path, monkeypatch, capsys):
    run_dir = rank0_run_dir(tmp_path)
    for key in ("LOCAL_RANK", "RANK", "SLURM_PROCID"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(SystemExit):
        RunDirGuard().on_run_start(guard_config(run_dir))
    # refused for holding a run, not for a check that failed (any error exits too)
    assert f"hydra.run.dir={run_dir} already holds a run" in capsys.readouterr().err


def test_relaunching_strategy_single_run_end_to_end(tmp_path):
    """trainer.strategy=ddp re-runs the command line for rank 1 into rank 0's run dir (as
    trainer=fsdp does on GPUs): one run dir, one completed record, one summary."""
    result = run_cli(
        tmp_path,
        *DDP_TINY,
        "trainer.strategy=ddp",
        timeout=400,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (run_dir,) = (tmp_path / "outputs" / "runs").iterdir()
    record = json.loads((run_dir / "metrics.json").read_text())
    assert record["status"] == "completed" and record["device"] == "cpu x2"
    assert result.stdout.count("  val/acc_best ") == 1  # rank 1 prints no second summary


class TinyLinear(torch.nn.Module):
    """4 features -> 3 classes, with the models' contract (a ModelOutput); at module level, so
    ddp_spawn's workers can unpickle it."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 3)

    def forward(self, input: torch.Tensor) -> ModelOutput:
        return ModelOutput(self.layer(input))


def test_notes_of_a_spawned_test_reach_the_record(tmp_path, monkeypatch):
    """Under ddp_spawn (trainer=ddp_cpu) the task that tests is a worker's copy, so its notes
    (here: a test set of one class) reach the run through the record, not the main's task."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    record = RunRecord(tmp_path, seed=0, overrides=[])
    record.start()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp_spawn",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[EpochHistory(record), EndSpawnedProcessGroup()],
    )
    one = [{"input": torch.randn(5, 4), "labels": torch.full((5,), 2)} for _ in range(4)]
    task = ClassificationTask(TinyLinear(), 3, torch.optim.Adam)
    trainer.test(task, dataloaders=DataLoader(one, batch_size=None), verbose=False)
    assert task.notes == []  # the main process's task never tested
    record.reload(*WORKER_KEYS)
    assert [w for w in record.data["warnings"] if "has label 2" in w]
