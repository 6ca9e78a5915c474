"""Resuming a training run: where it goes on from, and the checks that it can (same data, a
checkpoint this version's model and optimizer take), made before anything trains."""

import logging
from pathlib import Path

import torch
from omegaconf import DictConfig

from attnexp.data.base import changed_splits
from attnexp.errors import ConfigError, message_lines
from attnexp.files import TORCH_LOAD_ERRORS
from attnexp.runner.build import resolved_data_dir
from attnexp.runner.final_metrics import checkpoint_step
from attnexp.runs.layout import holds_run
from attnexp.runs.overrides import override_arg
from attnexp.runs.ranks import is_other_rank
from attnexp.runs.record import LAST_CKPT
from attnexp.runs.requeue import requeued_run, scheduler_job
from attnexp.runs.resume import NO_RESUME
from attnexp.tasks import ClassificationTask
from attnexp.tasks.random_state import saved_states

log = logging.getLogger(__name__)

# Said by each refusal of a resume: how to go on without it.
NEW_RUN = "start a new run (drop resume=)"


def resume_point(cfg: DictConfig, run_dir: Path) -> tuple[Path | None, int]:
    """(the last.ckpt a resumed run goes on from, its global step); (None, 0) for a new run, and
    for resume=auto that found no earlier run (it starts afresh in a new dir)."""
    ckpt = run_dir / LAST_CKPT if cfg.get("resume") else None
    if ckpt is None or not ckpt.is_file():
        return None, 0
    return ckpt, resume_step_of(ckpt, cfg.resume)


def resume_step_of(ckpt: Path, resume: str) -> int:
    """checkpoint_step of the last.ckpt a resumed run goes on from, which may be broken (a disk
    that filled up, a copy cut short)."""
    try:
        return checkpoint_step(ckpt)
    except TORCH_LOAD_ERRORS as err:
        raise ConfigError(
            f"resume={resume}: {ckpt} is not a readable checkpoint ({type(err).__name__}), so the "
            f"run cannot continue from it (drop resume= to start a new run)"
        ) from err


def check_resume_data(earlier: dict, datamodule, data_dir: str, resume: str) -> None:
    """A resumed run trains on the data it trained on. paths.* may change on resume (the data may
    have moved), so what is read is compared: the source (local files, hub, embedded sample) and,
    where both are recorded, each split's content."""
    was, now = earlier.get("data_source"), datamodule.source
    where = f"paths.data_dir={earlier.get('data_dir')}" if earlier.get("data_dir") else "its data"
    reads = f"(paths.data_dir={resolved_data_dir(data_dir)})"
    own = f"a resumed run goes on with its own data (give {where}"
    if was and was != now:
        raise ConfigError(
            f"resume={resume}: the run trained on {was} data, this attempt reads {now} data "
            f"{reads}: {own})"
        )
    changed = changed_splits(earlier.get("data_fingerprints"), datamodule.fingerprints)
    if changed:
        raise ConfigError(
            f"resume={resume}: the {' and '.join(changed)} data this attempt reads {reads} differ "
            f"from what the run trained on: {own}, or restore those files; or start a new run: drop "
            f"resume=)"
        )


def check_resume_fits(
    task: ClassificationTask, run_dir: Path, resume: str, world_size: int
) -> None:
    """The run's last checkpoint fits the model and optimizer this version builds (one saved by
    another version may hold a layer of another shape, or parameters split into other groups).
    Lightning restores both inside fit; they are tried here first, the weights on the task (fit
    restores them again) and the optimizer state on a throwaway optimizer, so a misfit is said
    before anything is trained."""
    ckpt = run_dir / LAST_CKPT
    state = torch.load(ckpt, map_location="cpu", weights_only=True, mmap=True)
    saved_states(state, str(ckpt), world_size)  # said here, not from inside fit
    said = f"resume={resume}: the run's last checkpoint, {ckpt}, does not fit the"
    whole = "A resumed run goes on from the checkpoint's whole training state: it is not resumed"
    try:
        task.load_state_dict(state["state_dict"])
    except (RuntimeError, KeyError) as err:
        raise ConfigError(
            f"{said} model this version of attnexp builds from the run's config ({one_line(err)}): "
            f"it was saved by another version (or the data changed: a vocabulary of another "
            f"size). {whole}; evaluate, which loads the weights, cannot take them either: test "
            f"it with the attnexp version that made it, or {NEW_RUN}"
        ) from err
    saved = state.get("optimizer_states") or []
    if not saved:
        return  # Lightning says what a checkpoint without an optimizer state lacks
    optimizer = task.build_optimizer()  # outside the try: its own settings' refusal is said as such
    try:
        optimizer.load_state_dict(saved[0])
    except (ValueError, KeyError) as err:
        raise ConfigError(
            f"{said} optimizer this version of attnexp builds from the run's config "
            f"({one_line(err)}): it was saved by another version. {whole}. To test it again: "
            f"python -m attnexp.evaluate {override_arg('ckpt_path', run_dir)} (which "
            f"loads the weights only); or {NEW_RUN}"
        ) from err


def one_line(err: BaseException) -> str:
    """torch's reason in one line: its first two (a size mismatch per parameter may follow)."""
    lines = message_lines(err)
    text = " ".join(lines[:2])
    return f"{text} ..." if len(lines) > 2 else text


def resume_if_requeued(cfg: DictConfig, run_dir: Path) -> None:
    """A preempted job that its scheduler requeued runs into its run's dir again: it continues
    that run (runs/requeue.py tells its own unfinished run from one it must not write into)."""
    if (
        scheduler_job() is not None
        and cfg.get("resume") in NO_RESUME
        and holds_run(run_dir)
        and requeued_run(run_dir, writes_record=not is_other_rank())
    ):
        log.warning("the job was requeued: continuing its run in %s", run_dir)
        cfg.resume = str(run_dir)
