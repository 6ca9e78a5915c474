"""SLURM without a cluster: the ranks srun would start, started by hand with the environment it
gives them (gloo on the CPU), and the sbatch request hydra/launcher=slurm makes."""

import json
import os
import socket
import subprocess
import sys

import pytest
from cli_helpers import TINY
from hydra.utils import instantiate
from omegaconf import OmegaConf

from attnexp.errors import ConfigError
from attnexp.runner.cluster import check_slurm_tasks

DDP_RUN = [
    *TINY,
    "trainer=ddp_cpu",
    "data.eval_variable_max=0",
    "data.eval_bag_sizes=[2]",
    "callbacks.attention_figures=null",
]
HYDRA_FILES = ["config.yaml", "hydra.yaml", "overrides.yaml"]
SLURM_KEYS = ("SLURM_", "SUBMITIT_", "LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clean_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(SLURM_KEYS)}
    (tmp_path / "data").mkdir(parents=True, exist_ok=True)
    return {**env, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def attnexp_cmd(tmp_path, *args: str) -> list[str]:
    paths = [f"paths.log_dir={tmp_path}/outputs", f"paths.data_dir={tmp_path}/data"]
    return [sys.executable, "-m", "attnexp", *paths, *args]


def srun_env(rank: int, ntasks: int, port: int) -> dict[str, str]:
    """What srun sets for task `rank` of a one-node job step with `ntasks` tasks."""
    return {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "attnexp",
        "SLURM_STEP_ID": "0",
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NTASKS_PER_NODE": str(ntasks),
        "SLURM_NNODES": "1",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NODELIST": "localhost",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank),
        "SLURM_NODEID": "0",
        "MASTER_PORT": str(port),  # srun's tasks take it from the job id; a free one here
    }


def start(root, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        attnexp_cmd(root, *DDP_RUN), env={**clean_env(root), **env}, cwd=root,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def srun_tasks(root) -> list[subprocess.Popen]:
    """trainer=ddp_cpu in a 2-task SLURM job step, each task started as srun starts it."""
    port = free_port()
    return [start(root, srun_env(rank, 2, port)) for rank in range(2)]


def finished(processes: list[subprocess.Popen]) -> list[str]:
    """Each process's stdout, once all have ended well."""
    outputs = [p.communicate(timeout=400) for p in processes]
    for process, (_, stderr) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, stderr[-4000:]
    return [stdout for stdout, _ in outputs]


def check_one_run(root, stdouts: list[str]) -> dict:
    """One run dir, written by rank 0 alone: its record, completed."""
    (run_dir,) = (root / "outputs" / "runs").iterdir()
    assert run_dir.name.startswith("slurm4242.0_")  # every task found the same dir by the job
    assert sorted(p.name for p in run_dir.glob("metrics*.json")) == ["metrics.json"]
    # rank 1 wrote no .hydra/ of its own
    assert sorted(p.name for p in (run_dir / ".hydra").iterdir()) == HYDRA_FILES
    record = json.loads((run_dir / "metrics.json").read_text())
    assert record["status"] == "completed" and record["device"] == "cpu x2"
    assert record["scheduler_job"] == {"scheduler": "slurm", "id": "4242"}
    assert any("ddp_spawn under SLURM: trained as ddp" in w for w in record["warnings"])
    assert stdouts[0].count("  val/acc_best ") == 1 and "val/acc_best" not in stdouts[1]
    assert (run_dir / "train.log").read_text().count("Seed set to 0") == 1  # rank 0's log only
    return record


def test_srun_tasks_are_the_ranks_of_one_run(tmp_path):
    """Each SLURM task is a rank (ddp, not ddp_spawn): one run dir, one completed record."""
    check_one_run(tmp_path, finished(srun_tasks(tmp_path)))


@pytest.mark.slow
def test_srun_tasks_train_what_ddp_spawn_trains(tmp_path):
    """The same run under ddp_spawn on a machine without SLURM gives the same metrics."""
    spawned_root, slurm_root = tmp_path / "spawn", tmp_path / "slurm"
    processes = [start(spawned_root, {}), *srun_tasks(slurm_root)]
    record = check_one_run(slurm_root, finished(processes)[1:])
    (spawned_dir,) = (spawned_root / "outputs" / "runs").iterdir()
    spawned = json.loads((spawned_dir / "metrics.json").read_text())
    assert spawned["status"] == "completed" and spawned["device"] == "cpu x2"
    assert record["metrics"] == spawned["metrics"]


def test_a_job_with_fewer_tasks_than_devices_is_refused(monkeypatch):
    """The failure this replaces: with one task and devices=2 both processes called themselves
    rank 0 and died on a taken port."""
    for key, value in srun_env(0, 1, 1).items():
        monkeypatch.setenv(key, value)
    trainer = OmegaConf.create({"devices": 2, "num_nodes": 1})
    with pytest.raises(ConfigError, match="trainer.devices=2.*1 task.*ntasks-per-node=2"):
        check_slurm_tasks(trainer)
    monkeypatch.delenv("SLURM_NTASKS_PER_NODE")  # salloc -n 1; srun: SLURM_NTASKS only
    with pytest.raises(ConfigError, match="trainer.devices=2.*1 task"):
        check_slurm_tasks(trainer)
    monkeypatch.setenv("SLURM_NNODES", "2")
    with pytest.raises(ConfigError, match="trainer.num_nodes=1.*2 node"):
        check_slurm_tasks(OmegaConf.create({"devices": 1, "num_nodes": 1}))
    monkeypatch.setenv("SLURM_JOB_NAME", "bash")  # salloc's shell: not SLURM's tasks (Lightning)
    check_slurm_tasks(trainer)


def test_slurm_launcher_asks_for_a_task_per_device(compose_cfg, tmp_path, monkeypatch):
    """2 nodes x 4 GPUs: the sbatch file submitit writes from hydra/launcher=slurm."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="pip install -e '.[sweep]'")
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    cfg = compose_cfg("hydra/launcher=slurm", "trainer=ddp", "trainer.devices=4",
                      "trainer.num_nodes=2", "hydra.launcher.partition=gpu")  # fmt: skip
    launcher = cfg.hydra.launcher
    assert (launcher.nodes, launcher.tasks_per_node, launcher.gpus_per_node) == (2, 4, 4)
    params = instantiate(launcher).params  # resolved, as the launcher hands them to submitit
    # submitit's SlurmExecutor wants srun on the PATH; it is never called here
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "srun").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "bin" / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    # as the launcher builds its executor: the queue-independent keys as they are, the rest
    # with the cluster's prefix
    executor = submitit.AutoExecutor(
        folder=tmp_path / "submitit",
        cluster="slurm",
        slurm_max_num_timeout=params["max_num_timeout"],
    )
    shared = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{
        k if k in shared else f"slurm_{k}": v
        for k, v in params.items() if k not in ("submitit_folder", "max_num_timeout")
    })  # fmt: skip
    sbatch = executor._executor._make_submission_file_text("python -m attnexp", "uid")
    for line in ("--nodes=2", "--ntasks-per-node=4", "--gpus-per-node=4", "--partition=gpu",
                 "--signal=USR2@120", "--cpus-per-task=8", "--time=240"):  # fmt: skip
        assert f"#SBATCH {line}\n" in sbatch, line

    cpu = compose_cfg("hydra/launcher=slurm", "trainer=ddp_cpu").hydra.launcher
    assert (cpu.tasks_per_node, cpu.gpus_per_node, cpu.nodes) == (2, None, 1)
