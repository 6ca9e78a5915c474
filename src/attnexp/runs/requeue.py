"""The scheduler job a run belongs to, and whether a run dir holds this job's own unfinished run.

A preempted job that SLURM or submitit requeues runs the same command again, into the same run
dir (a sweep job's dir is fixed by its number; a run's under SLURM by its job id, `job_run_name`).
Its record names the job it ran in (`scheduler_job` in metrics.json), so the requeued job tells
its own unfinished run, which it continues, from a finished run or another job's, which it never
writes into.
"""

import os
from pathlib import Path

from attnexp.errors import ConfigError
from attnexp.runs.lock import lock_held, owner_of
from attnexp.runs.record import LAST_CKPT, existing_record

RECORD_KEY = "scheduler_job"
# Lightning's rule for a SLURM job that is not run through srun tasks (salloc's shell): no SLURM.
INTERACTIVE_JOB_NAMES = ("bash", "interactive")
ONE_WRITER = "two processes never write one run dir"


def scheduler_job() -> dict[str, str] | None:
    """{"scheduler": "slurm" | "submitit-local", "id": ...} of the job this process runs in; the
    id stays the same when the job is requeued. None outside a scheduler's job."""
    if os.environ.get("SUBMITIT_EXECUTOR") == "local" and os.environ.get("SUBMITIT_LOCAL_JOB_ID"):
        return {"scheduler": "submitit-local", "id": os.environ["SUBMITIT_LOCAL_JOB_ID"]}
    job = os.environ.get("SLURM_JOB_ID")
    if job and os.environ.get("SLURM_JOB_NAME") not in INTERACTIVE_JOB_NAMES:
        return {"scheduler": "slurm", "id": job}
    return None


def job_run_name(label: str) -> str | None:
    """The name of a run started under SLURM: every task of the job (one per device) and the job
    requeued find the same dir by it, where a name with a start time and a random part would
    differ per task. None outside SLURM."""
    job = scheduler_job()
    if job is None or job["scheduler"] != "slurm":
        return None
    step = os.environ.get("SLURM_STEP_ID")
    name = f"slurm{job['id']}" + (f".{step}" if step else "")
    return f"{name}_{label}" if label else name


def restarted() -> bool:
    """Whether the scheduler says this job ran before: SLURM counts its requeues; submitit's local
    executor re-runs a requeued job under the same job id and counts nothing."""
    job = scheduler_job()
    if job is None:
        return False
    return job["scheduler"] != "slurm" or int(os.environ.get("SLURM_RESTART_COUNT") or 0) > 0


def _not_continued(run_dir: Path, record: dict, job: dict[str, str] | None) -> str | None:
    """Why this process may not continue the run in `run_dir` (None: it is this job's own
    unfinished run, requeued, and no process holds it)."""
    theirs = record.get(RECORD_KEY)
    if job is None or theirs != job:
        started = (
            f"by {theirs['scheduler']} job {theirs['id']}" if theirs else "outside a scheduler"
        )
        here = f"in {job['scheduler']} job {job['id']}" if job else "outside a scheduler"
        return (
            f", started {started}, and this process runs {here}: only its own job, requeued, "
            f"continues a run in its dir (give a new dir, or resume it on its own: python -m "
            f"attnexp <its overrides> resume=<its dir>)"
        )
    this_job = f"this {job['scheduler']} job ({job['id']})"
    if record.get("status") == "completed":
        return (
            f", completed by {this_job}: a finished run is not trained again (to train it on: "
            f"python -m attnexp <its overrides> resume=<its dir> with a raised trainer.max_epochs)"
        )
    if not restarted():
        return (
            f" of {this_job}, which the scheduler did not requeue (SLURM_RESTART_COUNT unset or "
            f"0): {ONE_WRITER}"
        )
    if lock_held(run_dir):
        return f" of {this_job}, still held by {owner_of(run_dir)}: {ONE_WRITER}"
    return None


def continues_own_run(run_dir: Path) -> bool:
    """True when `run_dir` holds this job's own unfinished run, which this process, the job
    requeued, continues. Raises ConfigError when it holds a finished run or another job's."""
    problem = _not_continued(run_dir, existing_record(run_dir), scheduler_job())
    if problem is not None:
        raise ConfigError(f"{run_dir} holds a run already{problem}")
    return True


def requeued_run(run_dir: Path, writes_record: bool) -> bool:
    """Whether this process continues the run that `run_dir` holds as its job requeued. The
    writer of the record (rank 0) checks the record; other ranks follow the scheduler's marker
    and the checkpoint (the record may be rank 0's new one by the time they look)."""
    if writes_record:
        return continues_own_run(run_dir)
    return restarted() and (run_dir / LAST_CKPT).is_file()
