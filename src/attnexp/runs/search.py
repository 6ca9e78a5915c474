"""Optuna searches through Hydra (`hparams_search=...`): the sweeper's ask-and-tell loop, and what
a trial's run needs to report to its trial.

Optuna chooses every value (its samplers) and judges every trial (its pruners); this module only
carries values between Optuna's study and Hydra's jobs. The plugin that Hydra finds,
`hydra_plugins.attnexp_optuna_sweeper`, is a thin shell around `search`.

- A trial is one job and one run dir; its Hydra job number is the trial's number in the study, so
  a search continued later (same `study_name` and `storage`) names its jobs after the earlier ones.
- How a trial ended is read from its run record (`metrics.json`), the same for every launcher:
  `completed` is told with the job's objective, `pruned` as pruned (Optuna keeps the last value
  reported), anything else (`failed`, no record) as failed, and the search goes on.
- `n_trials` is the number of finished trials (completed, pruned or failed) the study is to reach;
  a continued search runs what is missing. Workers sharing one study each stop at that count, so
  together they may end a few trials past it (at most their number of jobs in flight).
"""

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob, Override, Transformer
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from attnexp.errors import ConfigError, require_positive
from attnexp.runs.record import COMPLETED, PRUNED, existing_record

log = logging.getLogger(__name__)

SWEEPER_TARGET = "hydra_plugins.attnexp_optuna_sweeper.optuna_sweeper.OptunaSweeper"
STORAGE_FILE = "optuna.db"  # the study's sqlite file in the sweep dir, without a storage given
DIRECTIONS = ("maximize", "minimize")


def storage_url(storage: str | None, sweep_dir: str | Path) -> str:
    """`hydra.sweeper.storage`, or a sqlite file in the sweep dir where none is given (the runs
    report to the study from their own processes, so it cannot live in memory). A relative sqlite
    path is made absolute: jobs may run in another working directory."""
    if storage is None:
        return f"sqlite:///{(Path(sweep_dir) / STORAGE_FILE).resolve()}"
    prefix = "sqlite:///"
    if storage.startswith(prefix) and not storage[len(prefix) :].startswith("/"):
        return prefix + str(Path(storage[len(prefix) :]).resolve())
    return storage


@dataclass(frozen=True)
class TrialIdentity:
    """Where a run reports to: the study's storage and name, the trial's number and the metric."""

    storage: str
    study_name: str
    number: int
    monitor: str | None


def trial_identity(hydra_cfg: DictConfig) -> TrialIdentity | None:
    """The trial a run is, from its Hydra config (`HydraConfig.get()`); None when it is not a job
    of our Optuna sweeper."""
    sweeper = hydra_cfg.get("sweeper") or {}
    if sweeper.get("_target_") != SWEEPER_TARGET or hydra_cfg.mode != RunMode.MULTIRUN:
        return None
    return TrialIdentity(
        storage=storage_url(sweeper.get("storage"), hydra_cfg.sweep.dir),
        study_name=sweeper.study_name,
        number=int(hydra_cfg.job.num),
        monitor=sweeper.get("monitor"),
    )


def distribution(key: str, override: Override) -> Any:
    """An Optuna distribution from Hydra's sweep syntax, as hydra-optuna-sweeper reads it:
    `choice(a, b)` and `a,b` -> categorical; `range(lo, hi[, step])` -> integers (floats if any
    bound is a float), hi excluded; `interval(lo, hi)` -> floats, `tag(log, interval(...))` on a
    log scale."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    value = override.value()
    # glob(...) picks config group options by a name pattern: no space Optuna can sample
    if isinstance(value, Glob):
        pass
    elif override.is_choice_sweep() or (override.is_range_sweep() and value.shuffle):
        return CategoricalDistribution(
            list(override.sweep_iterator(transformer=Transformer.encode))
        )
    elif override.is_range_sweep():  # the last value the range reaches is the upper bound
        start, stop, step = value.start, value.stop, value.step
        last = start + step * (math.ceil((stop - start) / step) - 1)
        if any(isinstance(v, float) for v in (start, stop, step)):
            return FloatDistribution(start, last, step=step)
        return IntDistribution(int(start), int(last), step=int(step))
    elif override.is_interval_sweep():  # Hydra reads its bounds as floats
        return FloatDistribution(value.start, value.end, log="log" in value.tags)
    raise ConfigError(
        f"hydra.sweeper.params.{key}={override.input_line.split('=', 1)[1]} is not a search space "
        f"Optuna takes (give choice(a, b, ...), range(lo, hi[, step]), interval(lo, hi) or "
        f"tag(log, interval(lo, hi)))"
    )


def search_space(
    params: dict[str, str] | None, arguments: Sequence[str]
) -> tuple[dict[str, Any], list[str]]:
    """The distributions to search (`hydra.sweeper.params` and the command line's sweeps, the
    command line winning) and the overrides every trial gets (the command line's fixed ones)."""
    parser = OverridesParser.create()
    given = parser.parse_overrides(list(arguments))
    on_command_line = {o.key_or_group for o in given}
    lines = [f"{k}={v}" for k, v in (params or {}).items() if k not in on_command_line]
    space, fixed = {}, []
    for override in [*given, *parser.parse_overrides(lines)]:
        if override.is_sweep_override():
            # the key as given (`+key` adds one the config lacks), so each trial's override is too
            key = override.get_key_element()
            space[key] = distribution(key, override)
        else:
            fixed.append(override.input_line)
    return space, fixed


def contiguous_runs(numbers: Sequence[int]) -> list[list[int]]:
    """[3, 4, 7, 8, 9] -> [[3, 4], [7, 8, 9]]: trials a launcher can start as one batch, their
    job numbers being the trials' numbers (another worker may have asked for those between)."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return runs


def outcome(job_return: Any) -> tuple[str, float | None, str]:
    """How a job ended, for its trial: ("complete", value, why), ("pruned", None, why) or
    ("fail", None, why), read from the job's run record (`metrics.json`)."""
    from hydra.core.utils import JobStatus

    if job_return.status != JobStatus.COMPLETED:
        try:
            job_return.return_value  # noqa: B018 (Hydra re-raises the job's exception)
        except Exception as err:
            return "fail", None, f"the job raised {type(err).__name__}: {err}"
        return "fail", None, f"the job ended as {job_return.status.name}"
    run_dir = OmegaConf.select(job_return.hydra_cfg or {}, "hydra.runtime.output_dir")
    status = existing_record(Path(run_dir)).get("status") if run_dir else None
    if status == PRUNED:
        return "pruned", None, "pruned"
    if status != COMPLETED:
        return "fail", None, f"its run dir {run_dir} records status {status}"
    value = job_return.return_value
    if not isinstance(value, int | float) or math.isnan(value):
        objective = OmegaConf.select(job_return.cfg or {}, "optimized_metric")
        return "fail", None, f"optimized_metric={objective} gave {value!r}, not a number"
    return "complete", float(value), "completed"


def check_settings(n_trials: int, n_jobs: int, pruner: Any, monitor: str | None) -> None:
    require_positive("hydra.sweeper.n_trials", n_trials)
    require_positive("hydra.sweeper.n_jobs", n_jobs)
    from optuna.pruners import NopPruner

    if pruner is not None and not isinstance(pruner, NopPruner) and monitor is None:
        raise ConfigError(
            f"hydra.sweeper.pruner={type(pruner).__name__} judges the values each run reports, "
            f"and hydra.sweeper.monitor=null reports none (set hydra.sweeper.monitor=val/acc, the "
            f"metric of each validation, or hydra/sweeper/pruner=nop)"
        )


def open_storage(url: str, attempts: int = 3) -> Any:  # optuna.storages.BaseStorage
    """Optuna's storage at `url`. Workers started together on a new database each create its
    tables and stamp their version, and all but one fail on the stamp's unique key; the tables
    are there once the first is done, so the others try again."""
    import optuna
    from sqlalchemy.exc import IntegrityError, OperationalError

    for attempt in range(1, attempts + 1):
        try:
            return optuna.storages.get_storage(url)
        except (IntegrityError, OperationalError) as err:
            if attempt == attempts:
                raise
            log.info("storage busy (%s): trying again", type(err).__name__)
            time.sleep(attempt)


def make_study(
    storage: str, study_name: str, direction: str, sampler: Any, pruner: Any
) -> Any:  # optuna.Study
    """The study, created or (same name, same storage) continued."""
    import optuna

    if direction not in DIRECTIONS:
        raise ConfigError(
            f"hydra.sweeper.direction={direction} is not one of {', '.join(DIRECTIONS)} "
            f"(set hydra.sweeper.direction=...)"
        )
    study = optuna.create_study(
        storage=open_storage(storage),
        study_name=study_name,
        sampler=sampler,
        pruner=pruner,
        direction=direction,
        load_if_exists=True,
    )
    from sqlalchemy.engine import make_url

    shown = make_url(storage).render_as_string(hide_password=True)
    log.info("study %s in %s (%s)", study_name, shown, type(pruner).__name__)
    stored = study.direction.name.lower()
    if stored != direction:
        raise ConfigError(
            f"hydra.sweeper.direction={direction}, but the study {study_name} in {storage} "
            f"was made to {stored} (set hydra.sweeper.direction={stored}, or give a new "
            f"hydra.sweeper.study_name=...)"
        )
    return study


def finished_trials(study: Any) -> int:
    from optuna.trial import TrialState

    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return len(study.get_trials(deepcopy=False, states=done))


def search(
    study: Any,
    space: dict[str, Any],
    fixed: list[str],
    n_trials: int,
    n_jobs: int,
    launch: Callable[[list[list[str]], int], Sequence[Any]],
) -> None:
    """Ask for up to `n_jobs` trials at a time, launch them (`launch(overrides, first job
    number)`), tell each how it ended, until the study holds `n_trials` finished trials."""
    from optuna.trial import TrialState

    states = {"complete": TrialState.COMPLETE, "pruned": TrialState.PRUNED}
    before = finished_trials(study)
    if before:
        log.info("study %s holds %d finished trials: continuing it", study.study_name, before)
    while (todo := min(n_jobs, n_trials - finished_trials(study))) > 0:
        trials = {t.number: t for t in (study.ask(space) for _ in range(todo))}
        for numbers in contiguous_runs(sorted(trials)):
            batch = [[*fixed, *(f"{k}={v}" for k, v in trials[n].params.items())] for n in numbers]
            for number, job_return in zip(numbers, launch(batch, numbers[0]), strict=True):
                kind, value, why = outcome(job_return)
                state = states.get(kind, TrialState.FAIL)
                study.tell(number, value if kind == "complete" else None, state=state)
                if kind == "fail":
                    log.warning("trial %d failed (%s); the search goes on", number, why)
    counts = {
        state.name.lower(): len(study.get_trials(deepcopy=False, states=(state,)))
        for state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    }
    log.info(
        "study %s: %d trials finished (%s)",
        study.study_name,
        sum(counts.values()),
        ", ".join(f"{n} {state}" for state, n in counts.items()),
    )
    if counts["complete"]:
        best = study.best_trial
        log.info("best: trial %d, value %s, %s", best.number, best.value, best.params)
