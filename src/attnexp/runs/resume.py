"""`resume=`: the run dir it continues (`<dir>`, or `auto`: the newest unfinished run with these
overrides), and the checks that it continues the same run: the settings it was started with,
the config today's conf/ builds from them, and an epoch limit it has not passed. The earlier
record is kept as `metrics.attempt<k>.json` before a new one is written (record.py)."""

import json
import logging
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from attnexp.errors import ConfigError
from attnexp.files import TORCH_LOAD_ERRORS, checkpoint_value
from attnexp.runs.flatten import flat_config
from attnexp.runs.layout import RUN_CONFIG, RUN_OVERRIDES, is_run, run_holding, saved_overrides
from attnexp.runs.naming import new_run_name, run_label
from attnexp.runs.overrides import override_arg, override_key
from attnexp.runs.record import LAST_CKPT, METRICS_FILE, existing_record
from attnexp.runs.requeue import job_run_name

log = logging.getLogger(__name__)

RESUME_KEY = "resume"
NO_RESUME = (None, "", "null", "None")
# What a resumed run may set differently from its first attempt: how long to train and where
# things are, not what is trained (a changed model or dataset would not fit the checkpoint).
RESUME_MAY_CHANGE = (
    "trainer.max_epochs",
    "trainer.max_steps",
    "trainer.enable_progress_bar",
    "data.num_workers",
    "paths.",
)
# How the refusal names them: "paths." is every key under paths.
MAY_CHANGE_NAMES = ", ".join(f"{key}*" if key.endswith(".") else key for key in RESUME_MAY_CHANGE)
ABSENT = object()  # a key one of two configs lacks
SHOWN_DIFFERENCES = 5


def _by_key(overrides: list[str]) -> dict[str, str]:
    return {override_key(o): o for o in sorted(overrides) if override_key(o) != RESUME_KEY}


def _fixed_settings(overrides: list[str]) -> dict[str, str]:
    """What a resumed run must be started with again: all but `RESUME_MAY_CHANGE`."""
    return {k: o for k, o in _by_key(overrides).items() if not k.startswith(RESUME_MAY_CHANGE)}


def find_resumable(runs_root: Path, overrides: list[str]) -> tuple[Path | None, Path | None]:
    """(the newest unfinished run under `runs_root` with a last.ckpt, the newest completed one),
    among the runs started with these overrides (apart from `resume=` and `RESUME_MAY_CHANGE`)."""
    wanted = _fixed_settings(overrides)
    unfinished, completed = [], []
    for run_dir in runs_root.glob("*"):
        if not (run_dir / LAST_CKPT).is_file() or not (run_dir / RUN_OVERRIDES).is_file():
            continue
        saved = saved_overrides(run_dir)
        if saved is None:
            log.warning("resume=auto: skipping %s, whose %s cannot be read", run_dir, RUN_OVERRIDES)
        elif _fixed_settings(saved) == wanted:
            done = existing_record(run_dir).get("status") == "completed"
            (completed if done else unfinished).append(run_dir)

    def newest(dirs: list[Path]) -> Path | None:
        return max(dirs, key=lambda d: (d / LAST_CKPT).stat().st_mtime, default=None)

    return newest(unfinished), newest(completed)


def resolve_run_dir(resume: str | None, runs_root: str, overrides: list[str]) -> str:
    """hydra.run.dir: a fresh dir, or the dir of the run to resume (`resume=<dir>` or `auto`).

    `RunDirGuard` has checked a `resume=<dir>` before this runs.
    """
    root = Path(runs_root)
    if resume in NO_RESUME:  # under SLURM, named by the job: all its tasks share the dir
        return str(root / (job_run_name(run_label(overrides)) or new_run_name(overrides)))
    if resume == "auto":
        found, completed = find_resumable(root, list(overrides))
        if found is None:
            done = (
                f"the newest run with these overrides, {completed}, has completed (to train it "
                f"on: {override_arg('resume', completed)} with a raised trainer.max_epochs)"
                if completed is not None
                else "no earlier run with these overrides left a checkpoint"
            )
            log.warning("resume=auto: %s; starting a new run in %s", done, root)
            return str(root / new_run_name(overrides))
        return str(found)
    run_dir = Path(resume).expanduser().resolve()
    record = existing_record(run_dir)
    if record.get("status") == "completed":
        log.warning(
            "resume=%s: the run has completed: %s (its record so far is kept as "
            "metrics.attempt<k>.json)",
            resume,
            resumed_training(record),
        )
    return str(run_dir)


def resumed_dir(config: DictConfig) -> Path | None:
    """The run dir `resume=` continues (None: a new run). hydra.run.dir itself cannot be read in
    `on_run_start`: it interpolates `${hydra:...}`, which is set only once the job starts."""
    resume = config.get(RESUME_KEY)
    if resume in NO_RESUME:
        return None
    if resume == "auto":  # as the run dir's resolver finds it (conf/hydra/default.yaml)
        runs_root = Path(config.paths.log_dir) / "runs"
        return find_resumable(runs_root, list(config.hydra.overrides.task))[0]
    return Path(str(resume)).expanduser().resolve()


def resumed_training(record: dict) -> str:
    """What a completed run trains when resumed. One its early-stopping callback ended is not at
    its limits: the callback's state (its count of validations without improvement) comes back
    with it, so it trains on to the next validation that does not improve (further while they
    do)."""
    stopped = record.get("stopped_early")
    if isinstance(stopped, dict):
        return (
            f"it stopped early (epoch {stopped.get('epoch')}), so it trains on until its "
            f"early stopping stops it again (the first validation that does not improve on its "
            f"best does), within trainer.max_epochs / max_steps, then is tested again"
        )
    return (
        "it trains on only as far as a raised trainer.max_epochs / max_steps allows, then is "
        "tested again"
    )


def _evaluate_command(run: object) -> str:
    """How to test a run again without resuming it (built from its own saved config)."""
    return f"python -m attnexp.evaluate {override_arg('ckpt_path', run)}"


def _unresumable(run_dir: Path) -> str | None:
    """Why `run_dir` holds no run that `resume=` can continue (None: it holds one)."""
    if not (run_dir / LAST_CKPT).is_file():
        return (
            f"no {LAST_CKPT} in {run_dir} (give a run dir with a last checkpoint, or resume=auto)"
        )
    if not is_run(run_dir):
        return (
            f"{run_dir} is not an attnexp run dir (no readable {METRICS_FILE} run record beside "
            f"its {LAST_CKPT}; another program's checkpoint?): resume= continues a run attnexp "
            f"started (give its dir, or resume=auto)"
        )
    if saved_overrides(run_dir) is None and (run_dir / RUN_OVERRIDES).is_file():
        return (
            f"{run_dir / RUN_OVERRIDES} cannot be read, so whether this command sets what the run "
            f"was started with cannot be checked (restore the file: one override per line, as "
            f"'- key=value')"
        )
    return None


def check_resume(resume: str, overrides: list[str]) -> None:
    """`resume=<dir>`: the dir holds a last checkpoint, and this command sets what the run was
    started with (apart from `RESUME_MAY_CHANGE`)."""
    run_dir = Path(resume).expanduser().resolve()
    held = run_holding(run_dir)
    if held is not None and held != run_dir:  # e.g. <run>/checkpoints/last.ckpt
        raise ConfigError(
            f"resume={resume} lies inside the run {held}: give the run dir, "
            f"{override_arg(RESUME_KEY, held)}"
        )
    problem = _unresumable(run_dir)
    if problem is not None:
        raise ConfigError(f"resume={resume}: {problem}")
    saved = saved_overrides(run_dir) or []
    wanted, given = _fixed_settings(saved), _fixed_settings(overrides)
    differ = sorted(k for k in wanted.keys() | given.keys() if wanted.get(k) != given.get(k))
    if differ:
        # its own settings, with this command's of those that may change (not the first
        # attempt's trainer.max_epochs, which a run trained on since may have passed)
        may_change = {k: o for k, o in _by_key(overrides).items() if k not in given}
        command = [*wanted.values(), *may_change.values(), override_arg(RESUME_KEY, resume)]
        raise ConfigError(
            f"resume={resume}: that run was started with other settings (differing: "
            f"{', '.join(differ)}). A resumed run continues with its own settings; only "
            f"{MAY_CHANGE_NAMES} may change. To resume it: python -m attnexp {' '.join(command)}"
        )


def _shown(value: object) -> str:
    if value is ABSENT:
        return "<absent>"
    return value if isinstance(value, str) else json.dumps(value)


def _saved_config(saved_file: Path, resume: str) -> dict:
    """A run's composed config as it was saved, unresolved."""
    try:
        saved = OmegaConf.to_container(OmegaConf.load(saved_file), resolve=False)
        problem = (
            None if isinstance(saved, dict) else f"holds a {type(saved).__name__}, not a config"
        )
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        problem = f"cannot be read ({type(err).__name__})"
    if problem is not None:
        raise ConfigError(
            f"resume={resume}: {saved_file} {problem}, so whether this version of attnexp builds "
            f"the run it was cannot be checked (restore the file; or start a new run: drop "
            f"resume=)"
        )
    return saved


def check_same_config(config: DictConfig, run_dir: Path, resume: str) -> None:
    """A resumed run is the run it was: today's conf/*.yaml, composed with the run's overrides,
    give the config the run was made with (its .hydra/config.yaml), apart from
    `RESUME_MAY_CHANGE`; else another attnexp or an edited conf/ would train another model or
    read other data on the run's checkpoint. Compared unresolved: `${...}` as written, not what
    it gives today."""
    composed = OmegaConf.to_container(config, resolve=False)
    composed.pop("hydra", None)
    theirs, ours = flat_config(_saved_config(run_dir / RUN_CONFIG, resume)), flat_config(composed)
    differ = sorted(
        k
        for k in theirs.keys() | ours.keys()
        if k != RESUME_KEY
        and not k.startswith(RESUME_MAY_CHANGE)
        and theirs.get(k, ABSENT) != ours.get(k, ABSENT)
    )
    if not differ:
        return
    shown = [
        f"{k}: the run's {_shown(theirs.get(k, ABSENT))}, today's {_shown(ours.get(k, ABSENT))}"
        for k in differ[:SHOWN_DIFFERENCES]
    ]
    more = len(differ) - SHOWN_DIFFERENCES
    which = "" if resume != "auto" else f" (the run it found, {run_dir})"
    raise ConfigError(
        f"resume={resume}{which}: the run was made with other config files than today's (an "
        f"older or newer attnexp, or an edited conf/): with its overrides they now give another "
        f"config ({'; '.join(shown)}{f'; and {more} more' if more > 0 else ''}). A resumed run "
        f"must continue the run it was, so it is not resumed: to test it again, "
        f"{_evaluate_command(run_dir)} (builds it from its own saved config); or start a new run "
        f"with today's config (drop resume=)"
    )


def check_resume_epochs(resume: str, max_epochs: object) -> None:
    """A resumed run trains on, never back: Lightning refuses (with a traceback, after the run's
    record is reopened) a trainer.max_epochs that ends before the epoch of its last checkpoint."""
    if type(max_epochs) is not int or max_epochs < 0:
        return
    last = Path(resume).expanduser().resolve() / LAST_CKPT
    try:
        epoch = checkpoint_value(last, "epoch")
    except (*TORCH_LOAD_ERRORS, TypeError):
        return  # train says what is wrong with it, before it trains
    if epoch > max_epochs:
        raise ConfigError(
            f"resume={resume}: the run's last checkpoint is in epoch {epoch} (counting from 0), "
            f"which trainer.max_epochs={max_epochs} ends before: a resumed run trains on, never "
            f"back (set trainer.max_epochs >= {epoch}; to test the run again: "
            f"{_evaluate_command(resume)})"
        )
