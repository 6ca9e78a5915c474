"""The Trainer inside a SLURM job: one SLURM task per device, Lightning's native SLURM mode.

Under SLURM, Lightning takes the world size and each process's rank from the job's tasks
(SLURM_NTASKS, SLURM_PROCID, ...) and ignores a strategy's own processes, so `ddp_spawn` (what
trainer=ddp and ddp_cpu use on a machine without SLURM) would start ranks that all call
themselves rank 0. There each task is one rank, started by srun: the strategy is plain `ddp`,
and `trainer.devices` must equal the tasks per node (hydra/launcher=slurm asks for that many).
Lightning's own auto-requeue stays off: preemption is handled by tasks/preemption.py.
"""

import os

from lightning_fabric.plugins.environments import SLURMEnvironment
from omegaconf import DictConfig, open_dict

from attnexp.errors import ConfigError
from attnexp.runs.record import RunRecord

SPAWNING = "ddp_spawn"


def under_slurm() -> bool:
    """Lightning's own test (SLURM_NTASKS set, not an interactive `bash` job)."""
    return SLURMEnvironment.detect()


def check_slurm_tasks(trainer_cfg: DictConfig) -> None:
    """Lightning refuses (or, for the nodes, hangs on) a job whose tasks do not match the
    trainer: said before any data is loaded, with both settings to change."""
    if not under_slurm():
        return
    devices, nodes = trainer_cfg.get("devices"), trainer_cfg.get("num_nodes", 1)
    per_node = os.environ.get("SLURM_NTASKS_PER_NODE")
    tasks = os.environ.get("SLURM_NTASKS", "")
    if per_node is None and tasks.isdigit() and type(devices) is int and type(nodes) is int:
        per_node = str(int(tasks) // nodes) if devices * nodes != int(tasks) else None
    if per_node is not None and per_node.isdigit() and devices != int(per_node):
        raise ConfigError(
            f"trainer.devices={devices}, and this SLURM job runs {per_node} task(s) per node: "
            f"under SLURM each device is one task (submit with "
            f"hydra/launcher=slurm, which asks for trainer.devices tasks per node, or "
            f"srun --ntasks-per-node={devices}; or set trainer.devices={per_node})"
        )
    job_nodes = os.environ.get("SLURM_NNODES") or os.environ.get("SLURM_JOB_NUM_NODES")
    if job_nodes is not None and job_nodes.isdigit() and nodes != int(job_nodes):
        raise ConfigError(
            f"trainer.num_nodes={nodes}, and this SLURM job runs on {job_nodes} node(s): set "
            f"trainer.num_nodes={job_nodes}, or submit with hydra/launcher=slurm, which asks "
            f"for trainer.num_nodes nodes"
        )


def slurm_plugins(settings: DictConfig, record: RunRecord) -> list:
    """Under SLURM: `ddp_spawn` becomes `ddp` (said and recorded), and the cluster environment
    that leaves requeueing to attnexp. `settings`: the Trainer's, changed in place."""
    if not under_slurm():
        return []
    if str(settings.get("strategy")) == SPAWNING:
        with open_dict(settings):
            settings.strategy = "ddp"
        record.warn(
            f"trainer.strategy={SPAWNING} under SLURM: trained as ddp, one SLURM task per device "
            f"(Lightning's SLURM mode; {SPAWNING} stays for a machine without SLURM)"
        )
    return [SLURMEnvironment(auto_requeue=False)]
