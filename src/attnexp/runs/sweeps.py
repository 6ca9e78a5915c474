"""Readable names for the jobs of a sweep: only the overrides the sweep varies.

Hydra's `override_dirname` names a job by every override on the command line, so with fixed
settings such as `trainer.max_epochs=1` every job dir (and TensorBoard run) starts with the same
long prefix. The sweep's own config (`multirun.yaml`, with the sweep expressions) is saved before
any job is launched, so a job can tell which of its overrides were swept.
"""

import hashlib
import itertools
import logging
import os
import re
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from attnexp.errors import ConfigError
from attnexp.runs.dirs import (
    check_output_dir_not_set,
    check_output_root,
    check_outside_runs,
    guarding,
)
from attnexp.runs.layout import holds_run
from attnexp.runs.naming import short_setting
from attnexp.runs.overrides import override_key
from attnexp.runs.record import ENDED_WELL, METRICS_FILE, read_record
from attnexp.runs.resume import NO_RESUME, RESUME_KEY

log = logging.getLogger(__name__)

NEW_SWEEP_DIR = (
    "give a new hydra.sweep.dir=..., or leave hydra.sweep.dir out for a new timestamped dir"
)

MAX_NAME = 160  # file systems allow 255 bytes per path component
# This process's multirun jobs that failed (run dirs), for the exit status: the jobs that ran here
# add themselves, FailedJobs adds those whose records on disk say so.
FAILED_JOBS: list[str] = []


def swept_keys(sweep_dir: str | Path) -> set[str] | None:
    """Keys (`seed`, `model.num_heads`, `experiment/bag`) swept in the sweep at `sweep_dir`.

    None when the sweep dir holds no `multirun.yaml` (SweepDirGuard saves one for every sweep).
    """
    path = Path(sweep_dir) / "multirun.yaml"
    if not path.is_file():
        return None
    hydra_cfg = OmegaConf.load(path).hydra
    parser = OverridesParser.create()
    given = parser.parse_overrides(list(hydra_cfg.overrides.task))
    params = OmegaConf.select(hydra_cfg, "sweeper.params", default=None) or {}
    # The command line wins over the sweeper's params: `-m experiment=bag/table seed=0` sweeps
    # the rows, not the seeds the experiment lists.
    on_command_line = {o.key_or_group.lstrip("+~") for o in given}
    from_params = parser.parse_overrides(
        [
            f"{key}={value}"
            for key, value in params.items()
            if key.lstrip("+~") not in on_command_line
        ]
    )
    return {o.key_or_group for o in [*given, *from_params] if o.is_sweep_override()}


def sweep_subdir(num: int, sweep_dir: str, overrides: list[str], fallback: str) -> str:
    """`<job num>_<swept overrides>`, e.g. `3_bag=dot,seed=1`; `fallback` if none are known."""
    keys = swept_keys(sweep_dir)
    parser = OverridesParser.create()
    varied = [
        o.input_line
        for o in parser.parse_overrides(list(overrides))
        if keys and o.key_or_group in keys
    ]
    name = ",".join(short_setting(line) for line in varied) if varied else fallback
    name = re.sub(r"[^\w=,.\-\[\]+:@]", "_", name)
    if len(name) > MAX_NAME:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[: MAX_NAME - 9]}_{digest}"
    return f"{num}_{name}" if name else str(num)


class FailedJobs(Callback):
    """Hydra callback: after a sweep, count its jobs whose metrics.json is not `completed` (or
    `pruned`: an Optuna trial stopped early by its search, as it should be).

    Jobs may run in other processes (joblib workers, SLURM tasks), so the main process cannot
    see their exceptions; their records on disk are the truth. A job still `running` once the
    sweep has ended was killed (timeout, OOM), so it counts as failed too.
    """

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        known = {Path(p).resolve() for p in FAILED_JOBS}  # already counted by this process
        for path in sorted(sweep_dir.glob(f"*/{METRICS_FILE}")):
            try:
                status = read_record(path).get("status")
            except (OSError, ValueError) as err:
                status = f"unreadable ({err})"
            if status not in ENDED_WELL and path.parent.resolve() not in known:
                FAILED_JOBS.append(str(path.parent.resolve()))


def earlier_sweep(sweep_dir: Path) -> Path | None:
    """What shows that `sweep_dir` holds a sweep already: its multirun.yaml or a job's dir."""
    if not sweep_dir.is_dir():
        return None
    if (sweep_dir / "multirun.yaml").exists():
        return sweep_dir / "multirun.yaml"
    dirs = (sweep_dir, *sorted(sweep_dir.iterdir()))
    return next((d for d in dirs if d.is_dir() and holds_run(d)), None)


class SweepDirGuard(Callback):
    """Hydra callback: before the sweeper writes anything, refuse a sweep dir holding a sweep;
    then save the sweep's config there (`multirun.yaml`).

    Job dirs are named by job number and overrides, so a sweep run again into the same dir lands
    in the earlier jobs' dirs: their configs overwritten, their records kept as if resumed,
    checkpoints and TensorBoard events mixed. The default sweep dir is new each time.

    Hydra's basic sweeper saves `multirun.yaml` itself (the same config, once more); other
    sweepers (Optuna) save none, and without it the job names could not tell the keys a sweep
    varies from those the command line fixes.
    """

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        with guarding("the sweep dir"):
            check_output_dir_not_set(config)
            check_no_resume(config)
            check_launcher(config)
            check_output_root(config, "hydra.sweep.dir")
            sweep_dir = Path(config.hydra.sweep.dir)
            check_outside_runs("hydra.sweep.dir", sweep_dir, NEW_SWEEP_DIR)
            found = earlier_sweep(sweep_dir)
            if found is not None:
                raise ConfigError(
                    f"hydra.sweep.dir={sweep_dir} holds an earlier sweep ({found} exists): its "
                    f"jobs would be re-run into the same dirs ({NEW_SWEEP_DIR})"
                )
            sweep_dir.mkdir(parents=True, exist_ok=True)
            OmegaConf.save(config, sweep_dir / "multirun.yaml")


def check_launcher(config: DictConfig) -> None:
    """hydra.launcher.n_jobs (hydra/launcher=parallel): joblib stops with a traceback on 0, and
    on anything but a whole number, after the sweep dir is made."""
    n_jobs = OmegaConf.select(config, "hydra.launcher.n_jobs", default=None)
    if n_jobs is not None and (type(n_jobs) is not int or n_jobs == 0):
        raise ConfigError(
            f"hydra.launcher.n_jobs={n_jobs} must be a whole number of parallel jobs other than 0 "
            f"(-1: one per core; set hydra.launcher.n_jobs=2, ...)"
        )


def check_no_resume(config: DictConfig) -> None:
    """resume= continues a run in its own dir, but every job of a sweep runs in a new dir of the
    sweep: there it would find no checkpoint and silently train from scratch."""
    lines = OmegaConf.select(config, "hydra.overrides.task", default=None) or []
    given = [o.split("=", 1)[1] for o in lines if override_key(o) == RESUME_KEY and "=" in o]
    values = [v for v in (*given, config.get(RESUME_KEY)) if v not in NO_RESUME]
    if values:
        raise ConfigError(
            f"{RESUME_KEY}={values[0]}: a multirun (-m) runs every job in a new dir of the sweep, "
            f"so no job would continue a run (each would train from scratch); resume a run on its "
            f"own, without -m: python -m attnexp <its overrides> \"{RESUME_KEY}='<run dir>'\""
        )


# Lightning strategies that start the other ranks by re-running the command line. Under a Hydra
# multirun each worker would re-run the whole sweep (lightning-hydra-template #393), so jobs of a
# local sweep must use a spawning strategy (ddp_spawn: trainer=ddp / ddp_cpu). A cluster that
# starts one process per rank itself (SLURM tasks, torchrun) is fine: nothing is re-launched.
RELAUNCHING_STRATEGIES = ("ddp", "fsdp", "fsdp_cpu_offload", "deepspeed")
EXTERNAL_LAUNCH_ENV = ("SLURM_NTASKS", "TORCHELASTIC_RUN_ID")


def check_strategy(strategy: object, multirun: bool) -> None:
    """Fail fast on a strategy that cannot run inside a local Hydra multirun."""
    name = str(strategy)
    relaunches = name in RELAUNCHING_STRATEGIES or name.startswith(("deepspeed", "ddp_find_unused"))
    external = any(key in os.environ for key in EXTERNAL_LAUNCH_ENV)
    if multirun and relaunches and not external:
        raise ConfigError(
            f"trainer.strategy={name} re-launches the script for each rank, which inside a "
            f"multirun would re-run the whole sweep (use trainer=ddp or trainer=ddp_cpu, which "
            f"spawn, or hydra/launcher=slurm with one task per device, or a single run)"
        )


MULTIRUN_FILE = "multirun.yaml"


def planned_jobs(sweep_dir: Path) -> list[list[str]] | None:
    """Each job (its overrides) of the basic-sweeper multirun in `sweep_dir`, as Hydra expands the
    sweep: the cartesian product of the swept values, from the `multirun.yaml` saved before the
    first job started. None where that cannot be told: no such file, another sweeper (Optuna
    decides its trials as it goes), a sweep that is not a list of values."""
    path = Path(sweep_dir) / MULTIRUN_FILE
    try:
        config = OmegaConf.load(path)
        sweeper = str(OmegaConf.select(config, "hydra.sweeper._target_"))
        lines = list(OmegaConf.select(config, "hydra.overrides.task") or [])
        params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    except (OSError, ValueError, TypeError):
        return None
    if not sweeper.endswith(".BasicSweeper"):
        return None
    lines += [f"{key}={value}" for key, value in params.items()]
    try:
        overrides = OverridesParser.create().parse_overrides(lines)
    except Exception:  # Hydra parsed them when the sweep started; a file edited since: unknown
        return None
    choices = []
    for override in overrides:
        if not override.is_sweep_override():
            choices.append([override.input_line])
        elif override.is_choice_sweep() or override.is_range_sweep():
            key = override.input_line.split("=", 1)[0]
            choices.append([f"{key}={value}" for value in override.sweep_string_iterator()])
        else:
            return None
    return [list(job) for job in itertools.product(*choices)]
