"""Run directories: new ones, resumed ones, and the guards that keep a command out of another
run's (the record they hold, `metrics.json`, is record.py's).

A run dir is never reused by accident: its name carries the start time and a random suffix; a dir
given by hand (hydra.run.dir=) must be new or empty (`check_new_dir`); `resume=` continues an
attnexp run only with the settings it was started with, and only where today's config files build
the config it was made with; it keeps the earlier record as `metrics.attempt<k>.json` before
writing a new one. The run's composed config (.hydra/) is written by the process that holds the
run's lock (`write_run_config`), not by Hydra before the job starts.
"""

import contextlib
import hashlib
import json
import logging
import os
import re
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from attnexp.errors import ConfigError, exit_with
from attnexp.files import (
    TORCH_LOAD_ERRORS,
    cannot_make_folders,
    checkpoint_value,
    not_a_folder,
    write_atomically,
)
from attnexp.runs.lock import lock_held, owner_of
from attnexp.runs.record import LAST_CKPT, METRICS_FILE, existing_record
from attnexp.runs.requeue import job_run_name

log = logging.getLogger(__name__)

RUN_CONFIG = Path(".hydra") / "config.yaml"  # the composed config Hydra writes into every run dir
RUN_OVERRIDES = Path(".hydra") / "overrides.yaml"  # the command line's overrides, beside it
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


def natural_key(name: str) -> list:
    """Sort key for run and metric names: numbers by value, so test/acc_bag2 before _bag10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def new_run_name(overrides: list[str] = ()) -> str:
    """Start time plus a random suffix (two runs started in the same second still differ), then
    what the run was asked for (`run_label`): a dir listing and TensorBoard's run list tell runs
    apart by it."""
    stamp = f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{uuid.uuid4().hex[:6]}"
    label = run_label(overrides)
    return f"{stamp}_{label}" if label else stamp


def short_setting(line: str) -> str:
    """`+experiment/bag=mlp` -> `bag=mlp`: an override as a run's or job's name shows it."""
    key, _, value = line.lstrip("+~").partition("=")
    key = key.rsplit("/", 1)[-1]
    return f"{key}={value}".replace("/", "_")


# Settings that say where a run's files go or how it shows progress, not what it computes.
UNLABELLED = ("paths.", "hydra.", "resume", "trainer.enable_progress_bar", "data.num_workers")
MAX_LABEL = 96


def run_label(overrides: list[str]) -> str:
    """`model=lstm_attn,scorer=dot`: the command line's settings, without UNLABELLED ones, safe
    as a file name and at most MAX_LABEL characters (a digest of the rest after that)."""
    parts = []
    for line in overrides:
        key = override_key(line)
        if key.startswith(UNLABELLED):
            continue
        parts.append(
            f"no-{key.rsplit('/', 1)[-1]}" if line.startswith("~") else short_setting(line)
        )
    label = re.sub(r"[^\w=,.\-+]", "_", ",".join(parts))
    if len(label) > MAX_LABEL:
        digest = hashlib.sha1(label.encode()).hexdigest()[:8]
        label = f"{label[: MAX_LABEL - 9]}_{digest}"
    return label


def override_key(override: str) -> str:
    """ "+model.hidden_size=16" -> "model.hidden_size"."""
    return override.lstrip("+~").split("=", 1)[0]


def _without_resume(overrides: list[str]) -> list[str]:
    return sorted(o for o in overrides if override_key(o) != RESUME_KEY)


def saved_overrides(run_dir: Path) -> list[str] | None:
    """The overrides a run was started with (.hydra/overrides.yaml); None when the file is not
    there or is not a list that YAML can read (edited by hand, cut short)."""
    try:
        saved = yaml.safe_load((run_dir / RUN_OVERRIDES).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if saved is None:  # an empty file: a run started with no overrides
        return []
    return [str(o) for o in saved] if isinstance(saved, list) else None


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


def _by_key(overrides: list[str]) -> dict[str, str]:
    return {override_key(o): o for o in _without_resume(overrides)}


def _fixed_settings(overrides: list[str]) -> dict[str, str]:
    """What a resumed run must be started with again: all but `RESUME_MAY_CHANGE`."""
    return {k: o for k, o in _by_key(overrides).items() if not k.startswith(RESUME_MAY_CHANGE)}


def override_arg(key: str, value: object) -> str:
    """`key=value` as one command-line argument: quoted where Hydra's parser or the shell would
    split the value (sweep job dirs are named like `1_scorer=dot,seed=0`)."""
    text = str(value)
    if re.fullmatch(r"[\w./~+:@-]*", text):
        return f"{key}={text}"
    return f"\"{key}='{text}'\""


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
    if not (run_dir / LAST_CKPT).is_file():
        raise ConfigError(
            f"resume={resume}: no {LAST_CKPT} in {run_dir} (give a run dir with a last checkpoint, "
            f"or resume=auto)"
        )
    if not is_run(run_dir):
        raise ConfigError(
            f"resume={resume}: {run_dir} is not an attnexp run dir (no readable {METRICS_FILE} "
            f"run record beside its {LAST_CKPT}; another program's checkpoint?): resume= "
            f"continues a run attnexp started (give its dir, or resume=auto)"
        )
    saved = saved_overrides(run_dir) if (run_dir / RUN_OVERRIDES).is_file() else []
    if saved is None:
        raise ConfigError(
            f"resume={resume}: {run_dir / RUN_OVERRIDES} cannot be read, so whether this command "
            f"sets what the run was started with cannot be checked (restore the file: one "
            f"override per line, as '- key=value')"
        )
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


def flat_config(tree: dict, prefix: str = "") -> dict[str, object]:
    """{"model": {"hidden_size": 16}} -> {"model.hidden_size": 16}; lists are values."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(flat_config(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


ABSENT = object()  # a key one of two configs lacks
SHOWN_DIFFERENCES = 5


def _shown(value: object) -> str:
    if value is ABSENT:
        return "<absent>"
    return value if isinstance(value, str) else json.dumps(value)


def check_same_config(config: DictConfig, run_dir: Path, resume: str) -> None:
    """A resumed run must be the run it was: today's conf/*.yaml, composed with the run's
    overrides, must give the config the run was made with (its .hydra/config.yaml), apart from
    `RESUME_MAY_CHANGE`. A run made by an older or newer attnexp, or before conf/ was edited, went
    on as another model or on other data without a word, or ended in Lightning's traceback over
    the checkpoint's shapes. Compared unresolved: `${...}` as written, not what it gives today."""
    saved_file = run_dir / RUN_CONFIG
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
    composed = OmegaConf.to_container(config, resolve=False)
    composed.pop("hydra", None)
    theirs, ours = flat_config(saved), flat_config(composed)
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
        f"must continue the run it was, so it is not resumed: to test it again, python -m "
        f"attnexp.evaluate {override_arg('ckpt_path', run_dir)} (builds it from its own saved "
        f"config); or start a new run with today's config (drop resume=)"
    )


def check_resume_epochs(resume: str, max_epochs: object) -> None:
    """Lightning refuses (with a traceback, after the run's record is reopened) a resumed run
    whose trainer.max_epochs ends before the epoch of the checkpoint it goes on from."""
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
            f"back (set trainer.max_epochs >= {epoch}; to test the run again: python -m "
            f"attnexp.evaluate {override_arg('ckpt_path', resume)})"
        )


def check_not_running(run_dir: Path, setting: str) -> None:
    """Two processes must never write one run dir: its run's writer must have stopped."""
    if lock_held(run_dir):
        raise ConfigError(
            f"{setting}: the run in {run_dir} is still running ({owner_of(run_dir)} holds its "
            f"lock); wait for it to end or stop it, then resume it"
        )


def is_other_rank() -> bool:
    """A rank > 0 that re-ran the command line (Lightning's ddp/fsdp launcher, torchrun, SLURM):
    it shares rank 0's run dir, so it must not write the run record."""
    return any(os.environ.get(key, "0") != "0" for key in ("LOCAL_RANK", "RANK", "SLURM_PROCID"))


def holds_run(run_dir: Path) -> bool:
    """Whether a dir holds what a run writes (its record or checkpoints, maybe another
    program's): never written into by a new run."""
    return any((run_dir / name).exists() for name in (METRICS_FILE, "checkpoints"))


def is_run(run_dir: Path) -> bool:
    """Whether a dir is an attnexp run (or evaluation): its record can be read. Another Hydra
    app's dir, with a .hydra/config.yaml and checkpoints/ of its own, is not."""
    return isinstance(existing_record(run_dir).get("status"), str)


def run_holding(path: str | Path) -> Path | None:
    """`path` if it holds a run (or an evaluation), else the run dir it lies inside, if any."""
    path = Path(path).expanduser().resolve()
    if holds_run(path):
        return path
    return next((p for p in path.parents if holds_run(p) and (p / RUN_CONFIG).is_file()), None)


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


def check_output_root(config: DictConfig, dir_key: str) -> None:
    """The folder a new run or sweep goes into (`dir_key` given by hand, else paths.log_dir that
    holds it) must be a folder or one that can be made: Hydra would stop with a traceback."""
    hydra_overrides = OmegaConf.select(config, "hydra.overrides.hydra", default=None) or []
    given = any(o.startswith(f"{dir_key}=") for o in hydra_overrides)
    key = dir_key if given else "paths.log_dir"
    path = OmegaConf.select(config, key, default=None)
    blocker = not_a_folder(Path(str(path))) if path is not None else None
    if blocker is not None:
        raise ConfigError(
            f"{key}={path}: {blocker} is a file, so no output dir can be made there (set "
            f"{key}=<a folder>)"
        )
    refused = cannot_make_folders(Path(str(path))) if path is not None else None
    if refused is not None:
        folder, err = refused
        raise ConfigError(
            f"{key}={path}: no folder can be made in {folder} ({type(err).__name__}: "
            f"{err.strerror}), so no output dir can be made there (set {key}=<a folder this "
            f"user can write>)"
        )


SHOWN_ENTRIES = 3


def check_new_dir(run_dir: Path, can_resume: bool) -> None:
    """The one judge of a hand-picked hydra.run.dir for a new run: a folder that is not there yet
    or is empty, and that lies inside no run. A folder with anything in it (a source checkout,
    another program's outputs, another run) is refused: the run's checkpoints/, tb/, metrics.json
    and tokenizers would land among those files, overwriting any of the same name. Nothing below
    the folder is searched (hydra.run.dir=/ would search the whole disk)."""
    path = run_dir.expanduser().resolve()
    held = run_holding(path)
    if held is not None and held != path:
        raise ConfigError(
            f"hydra.run.dir={run_dir} lies inside the run {held}, whose files are never written "
            f"to (drop hydra.run.dir= for a new dir{_resume_hint(held, can_resume)})"
        )
    try:
        entries = sorted(entry.name for entry in path.iterdir()) if path.is_dir() else []
    except OSError as err:  # a folder that cannot be listed cannot be judged
        raise ConfigError(
            f"hydra.run.dir={run_dir} cannot be read ({type(err).__name__}: {err.strerror}): a "
            f"new run needs a new or empty folder (give one, or drop hydra.run.dir= for a new dir)"
        ) from None
    if not entries:
        return
    if held == path:
        raise ConfigError(
            f"hydra.run.dir={run_dir} already holds a run, which this one would overwrite (drop "
            f"hydra.run.dir= for a new dir{_resume_hint(held, can_resume)})"
        )
    shown = ", ".join(entries[:SHOWN_ENTRIES]) + (", ..." if len(entries) > SHOWN_ENTRIES else "")
    raise ConfigError(
        f"hydra.run.dir={run_dir} is not empty ({len(entries)} entries: {shown}): a new run "
        f"goes into a new or empty folder, never among other files (give a new folder, or drop "
        f"hydra.run.dir= for a new dir under paths.log_dir)"
    )


def _resume_hint(held: Path, can_resume: bool) -> str:
    return f", or resume={held} to continue that run" if can_resume and is_run(held) else ""


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


def write_run_config(
    run_dir: Path, config: DictConfig, hydra_config: DictConfig, overrides: list[str]
) -> Path:
    """Hydra's three files, written by the process that holds the run's lock: `config.yaml` (the
    composed config), `hydra.yaml` and `overrides.yaml` (conf/hydra/default.yaml turns off Hydra's
    own writing, which comes before the job starts: of two runs started at once on one dir, the
    one refused could leave its config beside the other's record). A resumed run keeps the
    original and writes its attempt's beside it, in `.hydra/resume_<time>/`. Returns the folder."""
    folder = run_dir / RUN_CONFIG.parent
    if (run_dir / RUN_CONFIG).is_file():
        folder = folder / f"resume_{datetime.now():%Y-%m-%d_%H-%M-%S}"
    files = {
        RUN_CONFIG.name: config,
        "hydra.yaml": OmegaConf.create({"hydra": hydra_config}),
        RUN_OVERRIDES.name: OmegaConf.create(list(overrides)),
    }
    for name, node in files.items():
        text = OmegaConf.to_yaml(node)
        write_atomically(folder / name, lambda partial, text=text: partial.write_text(text))
    return folder
