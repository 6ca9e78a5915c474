"""Which run dir a requeued job continues: its own unfinished run only."""

import json
import os

import pytest

from attnexp.errors import ConfigError
from attnexp.runs.lock import owning
from attnexp.runs.requeue import (
    continues_own_run,
    job_run_name,
    requeued_run,
    restarted,
    scheduler_job,
)

SCHEDULER_KEYS = ("SLURM_", "SUBMITIT_", "LOCAL_RANK", "RANK")


@pytest.fixture
def no_scheduler(monkeypatch):
    for key in list(os.environ):
        if key.startswith(SCHEDULER_KEYS):
            monkeypatch.delenv(key)


def in_slurm_job(monkeypatch, job="77", restarts=None, rank=0):
    monkeypatch.setenv("SLURM_JOB_ID", job)
    monkeypatch.setenv("SLURM_JOB_NAME", "attnexp")
    monkeypatch.setenv("SLURM_PROCID", str(rank))
    if restarts is not None:
        monkeypatch.setenv("SLURM_RESTART_COUNT", str(restarts))


def a_run(tmp_path, status="failed", job=None, pid=None, checkpoint=True):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    if checkpoint:
        (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"")
    record = {"status": status, "pid": pid, "host": os.uname().nodename}
    if job is not None:
        record["scheduler_job"] = job
    (run_dir / "metrics.json").write_text(json.dumps(record))
    return run_dir


def test_the_job_is_read_from_the_schedulers_variables(no_scheduler, monkeypatch):
    assert scheduler_job() is None and not restarted() and job_run_name("a=1") is None
    in_slurm_job(monkeypatch)
    assert scheduler_job() == {"scheduler": "slurm", "id": "77"}
    assert not restarted()  # SLURM counts restarts: none yet
    assert job_run_name("scorer=dot") == "slurm77_scorer=dot"
    monkeypatch.setenv("SLURM_STEP_ID", "2")
    assert job_run_name("") == "slurm77.2"
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert restarted()
    monkeypatch.setenv("SLURM_JOB_NAME", "interactive")  # salloc's shell, as Lightning sees it
    assert scheduler_job() is None

    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")
    monkeypatch.setenv("SUBMITIT_LOCAL_JOB_ID", "4321")
    assert scheduler_job() == {"scheduler": "submitit-local", "id": "4321"}
    assert restarted() and job_run_name("a=1") is None  # re-run under the same id; no count


def test_the_requeued_job_continues_its_own_unfinished_run(no_scheduler, monkeypatch, tmp_path):
    in_slurm_job(monkeypatch, restarts=1)
    run_dir = a_run(tmp_path, job={"scheduler": "slurm", "id": "77"})
    assert continues_own_run(run_dir) and requeued_run(run_dir, writes_record=True)


@pytest.mark.parametrize(
    ("status", "job", "restarts", "refusal"),
    [
        ("completed", "77", 1, "completed by this slurm job"),
        ("failed", "78", 1, "started by slurm job 78, and this process runs in slurm job 77"),
        ("failed", None, 1, "started outside a scheduler"),
        ("failed", "77", 0, "which the scheduler did not requeue"),
    ],
    ids=["finished", "another-job", "no-job", "not-requeued"],
)
def test_a_finished_run_or_another_is_refused(
    no_scheduler, monkeypatch, tmp_path, status, job, restarts, refusal
):
    in_slurm_job(monkeypatch, restarts=restarts)
    recorded = {"scheduler": "slurm", "id": job} if job else None
    run_dir = a_run(tmp_path, status=status, job=recorded)
    with pytest.raises(ConfigError, match=refusal):
        continues_own_run(run_dir)


def test_a_run_whose_lock_is_held_is_refused(no_scheduler, monkeypatch, tmp_path):
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")
    monkeypatch.setenv("SUBMITIT_LOCAL_JOB_ID", "4321")
    job = {"scheduler": "submitit-local", "id": "4321"}
    run_dir = a_run(tmp_path, status="running", job=job, pid=os.getpid())
    with owning(run_dir, "train"), pytest.raises(ConfigError, match=f"{os.getpid()}"):
        continues_own_run(run_dir)
    assert continues_own_run(run_dir)  # the lock died with its holder


def test_outside_a_scheduler_a_dir_holding_a_run_is_refused(no_scheduler, tmp_path):
    with pytest.raises(ConfigError, match="outside a scheduler.*only its own job"):
        continues_own_run(a_run(tmp_path))


def test_other_ranks_follow_the_restart_marker_and_the_checkpoint(
    no_scheduler, monkeypatch, tmp_path
):
    """A rank > 0 may look after rank 0 has begun the new attempt's record."""
    in_slurm_job(monkeypatch, restarts=0, rank=1)
    run_dir = a_run(tmp_path, status="running", job={"scheduler": "slurm", "id": "77"})
    assert not requeued_run(run_dir, writes_record=False)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert requeued_run(run_dir, writes_record=False)
    (run_dir / "checkpoints" / "last.ckpt").unlink()  # stopped before its first checkpoint
    assert not requeued_run(run_dir, writes_record=False)
