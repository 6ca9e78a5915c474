"""The guards on run dirs: before anything is written, a command goes only into a dir that is
its own. A new run's dir is new (named by naming.py) or, given by hand (hydra.run.dir=), empty
and inside no run; `resume=` continues a run that fits it (resume.py) and that no process is
writing; paths.output_dir is never set by hand. Hydra's callbacks run these checks (`RunDirGuard`
here, `SweepDirGuard` in sweeps.py); `check_claimed` repeats the one a race can pass, under the
run's lock."""

import contextlib
from collections.abc import Iterator
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from attnexp.errors import ConfigError, exit_with
from attnexp.files import cannot_make_folders, not_a_folder
from attnexp.runs.layout import RUN_CONFIG, holds_run, is_run, run_holding
from attnexp.runs.lock import lock_held, owner_of
from attnexp.runs.overrides import override_key
from attnexp.runs.ranks import is_other_rank
from attnexp.runs.record import METRICS_FILE
from attnexp.runs.resume import (
    NO_RESUME,
    RESUME_KEY,
    check_resume,
    check_resume_epochs,
    check_same_config,
    resumed_dir,
)

SHOWN_ENTRIES = 3
NEW_RUN_DIR = "drop hydra.run.dir= for a new dir"


class RunDirGuard(Callback):
    """Before Hydra writes anything into the run dir: a `resume=<dir>` must fit that run and that
    run must have stopped, and a dir given by hand (hydra.run.dir=) must neither hold a run nor lie
    inside one."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        if is_other_rank():
            # Lightning re-launches ranks > 0 of a ddp/fsdp run with hydra.run.dir=<rank 0's run
            # dir>, which rank 0 has written to (and, on resume, is still writing): rank 0 checked
            # that dir before it started, and these ranks write no record of their own.
            return
        resume = config.get(RESUME_KEY)
        run_dir_given = any(o.startswith("hydra.run.dir=") for o in config.hydra.overrides.hydra)
        with guarding("the run dir"):
            check_output_dir_not_set(config)
            if resume in (*NO_RESUME, "auto"):  # a new run dir (resume=auto may start one)
                check_output_root(config, "hydra.run.dir")
            elif run_dir_given:
                raise ConfigError(
                    f"resume={resume} continues that run in its own dir, and hydra.run.dir= "
                    f"would put it elsewhere (drop hydra.run.dir=)"
                )
            if resume not in (*NO_RESUME, "auto"):
                check_resume(str(resume), list(config.hydra.overrides.task))
            elif run_dir_given:
                check_new_dir(Path(config.hydra.run.dir), can_resume=RESUME_KEY in config)
            resumed = resumed_dir(config)
            if resumed is not None:
                check_not_running(resumed, f"resume={resume}")
                check_same_config(config, resumed, str(resume))
                check_resume_epochs(str(resumed), OmegaConf.select(config, "trainer.max_epochs"))


@contextlib.contextmanager
def guarding(what: str) -> Iterator[None]:
    """The body of a Hydra callback that checks `what` before anything is written. Hydra turns an
    exception raised in a callback into a warning and goes on, so every error ends the command
    here: a check that could not be made must not let the run through unchecked."""
    try:
        yield
    except ConfigError as err:
        exit_with(err)
    except Exception as err:
        exit_with(
            ConfigError(
                f"checking {what} failed, so nothing was started: {type(err).__name__}: {err}"
            )
        )


def check_output_dir_not_set(config: DictConfig) -> None:
    """paths.output_dir is the run's (or sweep job's) own dir, which Hydra makes new: set by hand,
    the checkpoints, logs and TensorBoard events would go to a folder that may hold another run."""
    lines = OmegaConf.select(config, "hydra.overrides.task", default=None) or []
    given = [o for o in lines if override_key(o) == "paths.output_dir"]
    if given:
        raise ConfigError(
            f"{given[0]}: paths.output_dir is the run's own dir, made new by Hydra, and is not "
            f"set by hand (choose a run's dir with hydra.run.dir=<new folder>, or where runs go "
            f"with paths.log_dir=<folder>)"
        )


def check_output_root(config: DictConfig, dir_key: str) -> None:
    """The folder a new run or sweep goes into (`dir_key` given by hand, else paths.log_dir that
    holds it) must be a folder or one that can be made: Hydra would stop with a traceback."""
    hydra_overrides = OmegaConf.select(config, "hydra.overrides.hydra", default=None) or []
    given = any(o.startswith(f"{dir_key}=") for o in hydra_overrides)
    key = dir_key if given else "paths.log_dir"
    path = OmegaConf.select(config, key, default=None)
    if path is None:
        return
    blocker = not_a_folder(Path(str(path)))
    refused = cannot_make_folders(Path(str(path))) if blocker is None else None
    if blocker is not None:
        problem, fix = f"{blocker} is a file", "<a folder>"
    elif refused is not None:
        folder, err = refused
        problem = f"no folder can be made in {folder} ({type(err).__name__}: {err.strerror})"
        fix = "<a folder this user can write>"
    else:
        return
    raise ConfigError(
        f"{key}={path}: {problem}, so no output dir can be made there (set {key}={fix})"
    )


def check_not_running(run_dir: Path, setting: str) -> None:
    """Two processes must never write one run dir: its run's writer must have stopped."""
    if lock_held(run_dir):
        raise ConfigError(
            f"{setting}: the run in {run_dir} is still running ({owner_of(run_dir)} holds its "
            f"lock); wait for it to end or stop it, then resume it"
        )


def check_outside_runs(setting: str, path: Path, fix: str) -> Path | None:
    """New output never goes inside a run dir. Returns the run `path` itself holds, if any."""
    held = run_holding(path)
    if held is not None and held != path.expanduser().resolve():
        raise ConfigError(
            f"{setting}={path} lies inside the run {held}, whose files are never written to ({fix})"
        )
    return held


def check_new_dir(run_dir: Path, can_resume: bool) -> None:
    """The one judge of a hand-picked hydra.run.dir for a new run: a folder that is not there yet
    or is empty, and that lies inside no run. A folder with anything in it (a source checkout,
    another program's outputs, another run) is refused: the run's checkpoints/, tb/, metrics.json
    and tokenizers would land among those files, overwriting any of the same name. Nothing below
    the folder is searched (hydra.run.dir=/ would search the whole disk)."""
    path = run_dir.expanduser().resolve()
    held = run_holding(path)
    resume_hint = (
        f", or resume={held} to continue that run" if held and can_resume and is_run(held) else ""
    )
    check_outside_runs("hydra.run.dir", run_dir, NEW_RUN_DIR + resume_hint)
    try:
        entries = sorted(entry.name for entry in path.iterdir()) if path.is_dir() else []
    except OSError as err:  # a folder that cannot be listed cannot be judged
        raise ConfigError(
            f"hydra.run.dir={run_dir} cannot be read ({type(err).__name__}: {err.strerror}): a "
            f"new run needs a new or empty folder (give one, or {NEW_RUN_DIR})"
        ) from None
    if not entries:
        return
    if held == path:
        raise ConfigError(
            f"hydra.run.dir={run_dir} already holds a run, which this one would overwrite "
            f"({NEW_RUN_DIR}{resume_hint})"
        )
    shown = ", ".join(entries[:SHOWN_ENTRIES]) + (", ..." if len(entries) > SHOWN_ENTRIES else "")
    raise ConfigError(
        f"hydra.run.dir={run_dir} is not empty ({len(entries)} entries: {shown}): a new run "
        f"goes into a new or empty folder, never among other files (give a new folder, or "
        f"{NEW_RUN_DIR} under paths.log_dir)"
    )


def check_claimed(run_dir: Path, resuming: bool) -> None:
    """Under the run's lock, before anything is written: a new run's dir still holds no run.
    Two runs started at once on one hydra.run.dir both pass `check_new_dir` (the dir is empty
    for both); the one that takes the lock second finds the first one's files here."""
    if resuming or not (holds_run(run_dir) or (run_dir / RUN_CONFIG).exists()):
        return
    raise ConfigError(
        f"{run_dir} was taken by another run started at the same time (its "
        f"{RUN_CONFIG if (run_dir / RUN_CONFIG).exists() else METRICS_FILE} is there): a new run "
        f"needs a folder of its own (give another hydra.run.dir=, or drop it for a new dir)"
    )
