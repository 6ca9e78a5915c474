"""`python -m attnexp <overrides>`: train, then test the best checkpoint; record everything.

Every run writes, in its own run dir: the composed config (.hydra/), checkpoints/ (best and last),
tb/ (TensorBoard), train.log and metrics.json.
"""

import errno
import logging
import os
import random
import shutil
import signal
from pathlib import Path

import pytorch_lightning as pl
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.accelerators import CPUAccelerator
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.utilities.exceptions import SIGTERMException

from attnexp.data.base import changed_splits
from attnexp.errors import ConfigError, message_lines, spawned_refusal
from attnexp.files import TORCH_LOAD_ERRORS, allow_checkpoint_globals, checkpoint_value
from attnexp.runner.build import build, check_data_dir, resolved_data_dir
from attnexp.runner.config import register_resolvers
from attnexp.runner.cpu_kernels import check_cpu_kernels
from attnexp.runner.threads import set_threads
from attnexp.runner.trainer import check_trainer_settings, device_name, make_trainer, monitors
from attnexp.runs.dirs import check_claimed
from attnexp.runs.flatten import flat_config
from attnexp.runs.layout import holds_run, is_run, write_run_config
from attnexp.runs.lock import owning
from attnexp.runs.overrides import override_arg
from attnexp.runs.ranks import is_other_rank
from attnexp.runs.record import COMPLETED, LAST_CKPT, PRUNED, WORKER_KEYS, RunRecord
from attnexp.runs.requeue import RECORD_KEY, requeued_run, scheduler_job
from attnexp.runs.resume import NO_RESUME
from attnexp.runs.sweeps import check_strategy
from attnexp.tasks import ClassificationTask
from attnexp.tasks.callbacks import best_checkpoint_callback, last_validation
from attnexp.tasks.loggers import log_final
from attnexp.tasks.preemption import Preempted, StopOnPreemption
from attnexp.tasks.random_state import saved_states

log = logging.getLogger(__name__)

register_resolvers()


def scalar_metrics(metrics: dict) -> dict[str, float]:
    return {
        k: float(v) for k, v in sorted(metrics.items()) if torch.is_tensor(v) and v.numel() == 1
    }


def last_epoch_metrics(record: RunRecord) -> dict[str, float]:
    """What the last recorded epoch logged (train/*, lr-*, its validation's val/*)."""
    history = record.data.get("history") or [{}]
    return {k: v for k, v in history[-1].items() if k not in ("epoch", "step")}


def draw_seed(cfg: DictConfig, record: RunRecord) -> None:
    """seed=null: draw one, and record it, so the run can still be repeated. A resumed run goes on
    with the seed its interrupted attempt drew (its data split and tokenizer depend on it)."""
    if record.earlier_seed is not None:
        cfg.seed = record.earlier_seed
        record.update(seed=cfg.seed)
        log.info("seed=null: resuming with the seed the run drew, %d", cfg.seed)
        return
    # A DDP rank > 0 re-runs the command line: it takes rank 0's draw (seed_everything exported it).
    inherited = os.environ.get("PL_GLOBAL_SEED") if is_other_rank() else None
    processes = max(int(os.environ.get(key) or 1) for key in ("WORLD_SIZE", "SLURM_NTASKS"))
    if inherited is None and processes > 1:
        raise ConfigError(
            f"seed=null: the {processes} processes of this job were started outside Lightning "
            f"(torchrun, srun) and would each draw their own seed, so their data splits and "
            f"samplers would differ: give seed=<int>"
        )
    cfg.seed = int(inherited) if inherited is not None else random.randrange(2**31)
    record.update(seed=cfg.seed)
    record.warn(f"seed=null: drew seed={cfg.seed} (give seed={cfg.seed} to repeat this run)")


def fit_and_test(cfg: DictConfig, run_dir: Path, record: RunRecord) -> dict[str, float]:
    check_trainer_settings(cfg)
    if cfg.seed is None:
        draw_seed(cfg, record)
    pl.seed_everything(cfg.seed, workers=True)
    allow_checkpoint_globals()  # Lightning's weights-only loads of resume and test
    choices = dict(HydraConfig.get().runtime.choices)
    overrides = list(HydraConfig.get().overrides.task)
    check_strategy(cfg.trainer.get("strategy"), HydraConfig.get().mode == RunMode.MULTIRUN)
    # resume=auto that found no earlier run starts afresh in a new dir, without a checkpoint.
    resume_ckpt = run_dir / LAST_CKPT if cfg.get("resume") else None
    if resume_ckpt is not None and not resume_ckpt.is_file():
        resume_ckpt = None
    resume_step = resume_step_of(resume_ckpt, cfg.resume) if resume_ckpt is not None else 0
    check_data_dir(cfg.paths.data_dir, overrides)
    # Built first: a trainer.* setting Lightning refuses is said before any data is loaded.
    trainer = make_trainer(cfg, record, resume_step)
    on_cpu = isinstance(trainer.accelerator, CPUAccelerator)
    record.update(
        device=device_name(trainer), torch_threads=set_threads(cfg.trainer.threads, on_cpu)
    )
    datamodule, task = build(cfg, choices, overrides=overrides)
    if on_cpu:
        check_cpu_kernels(trainer.precision, task.model, "trainer.precision")
    if resume_ckpt is not None:
        check_resume_data(record.earlier_data, datamodule, cfg.paths.data_dir, cfg.resume)
        check_resume_fits(task, run_dir, cfg.resume, trainer.world_size)
    record.update(
        data_source=datamodule.source,
        data_hash=datamodule.data_hash,
        data_fingerprints=datamodule.fingerprints,
        data_dir=resolved_data_dir(cfg.paths.data_dir),
        choices={k: v for k, v in choices.items() if not k.startswith("hydra")},
        num_params=sum(p.numel() for p in task.model.parameters()),
    )
    if getattr(datamodule, "summary", None):  # split sizes and checks (translation data)
        record.update(data_summary=datamodule.summary)
    if datamodule.source == "sample":
        record.warn("data: trained on the embedded sample, not the full dataset")
    for note in datamodule.notes:
        record.warn(f"data: {note}")
    datamodule.save_artifacts(str(run_dir))

    if resume_ckpt is not None:
        log.info("resuming from %s (global step %d)", resume_ckpt, resume_step)
        # an interrupted attempt's validations after its checkpoint are done again
        kept = [row for row in record.data["validations"] if row["step"] <= resume_step]
        record.update(validations=kept)
    preemption = next(c for c in trainer.callbacks if isinstance(c, StopOnPreemption))
    try:
        with preemption.catching(trainer):
            trainer.fit(task, datamodule=datamodule, ckpt_path=resume_ckpt, weights_only=True)
    except ConfigError:  # ours (a loss that turned NaN, say) says what to change
        raise
    except Preempted:  # handed to the scheduler, which requeues the job
        raise
    except Exception:
        # Lightning's own error goes on as it is; a monitor that names no logged metric is the
        # usual one (said at the first validation), so the settings that name metrics come first.
        log.error(
            "training stopped inside Lightning's fit (run dir %s; %s)",
            run_dir,
            ", ".join(monitors(cfg.callbacks)) or "no callback monitors a metric",
        )
        raise
    record.reload(*WORKER_KEYS)  # ddp_spawn: the rank-0 worker recorded them
    # A run resumed after its training had ended (killed while testing) trains nothing more and
    # logs nothing: its last epoch's metrics come from the record, as they were logged.
    metrics = {**last_epoch_metrics(record), **scalar_metrics(trainer.callback_metrics)}

    checkpoint = best_checkpoint_callback(trainer)
    best = checkpoint.best_model_path if checkpoint is not None else ""
    if best:
        best_val = validation_at(record, checkpoint_step(best))
        metrics = with_val_of(metrics, best_val, last_validation(record), record)
        metrics[f"{checkpoint.monitor}_best"] = best_score(checkpoint, best)
        record.record_best(best)
    else:
        record.warn(
            "no best checkpoint (checkpointing off, e.g. fast_dev_run, or no validation, e.g. "
            "trainer.limit_val_batches=0): testing the final weights"
        )
    if record.data.get("pruned"):
        log.info("the trial was pruned: the run ends untested")
    elif cfg.get("test", True):
        # Lightning's table has a column per test set: for the bags' 14, the summary says more
        verbose = not datamodule.test_set_names
        trainer.test(
            task, datamodule=datamodule, ckpt_path=best or None, verbose=verbose, weights_only=True
        )
        # test/* only: under ddp_spawn the main process's callback_metrics still hold the last
        # validation's val/*, which would replace the best checkpoint's
        tested = scalar_metrics(trainer.callback_metrics)
        metrics.update({k: v for k, v in tested.items() if k.startswith("test/")})
        record.reload(*WORKER_KEYS)  # ddp_spawn: the notes the test's rank-0 worker recorded
        if getattr(task, "results", None):  # sacrebleu signatures, probe translations
            record.update(translation=task.results)

    hparams = flatten_hparams(run_hparams(cfg, record.data.get("choices", {}), datamodule.source))
    # Each run's config with its final metrics (TensorBoard's HPARAMS tab, MLflow's params). The
    # metrics are written under tags of their own (final/...): under val/acc the best
    # checkpoint's value would be a stray point on the per-validation curve.
    final = {f"final/{k}": v for k, v in metrics.items() if k.startswith(("val/", "test/"))}
    for logger in trainer.loggers:
        log_final(logger, hparams, final, trainer.global_step)
    return metrics


def checkpoint_step(path: str | Path) -> int:
    """The global step a Lightning checkpoint was saved at (memory-mapped: reads little)."""
    return int(checkpoint_value(path, "global_step"))


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
    have moved), so what was read is compared: the source (local files, hub, embedded sample) and,
    where both are recorded, each split's content. A resume that forgot paths.data_dir went on
    with the embedded sample, its record and best checkpoint mixing two datasets."""
    was, now = earlier.get("data_source"), datamodule.source
    where = f"paths.data_dir={earlier.get('data_dir')}" if earlier.get("data_dir") else "its data"
    if was and was != now:
        raise ConfigError(
            f"resume={resume}: the run trained on {was} data, this attempt reads {now} data "
            f"(paths.data_dir={resolved_data_dir(data_dir)}): a resumed run goes on with its own "
            f"data (give {where})"
        )
    changed = changed_splits(earlier.get("data_fingerprints"), datamodule.fingerprints)
    if changed:
        raise ConfigError(
            f"resume={resume}: the {' and '.join(changed)} data this attempt reads "
            f"(paths.data_dir={resolved_data_dir(data_dir)}) differ from what the run trained on: "
            f"a resumed run goes on with its own data (give {where}, or restore those files; or "
            f"start a new run: drop resume=)"
        )


def check_resume_fits(
    task: ClassificationTask, run_dir: Path, resume: str, world_size: int
) -> None:
    """Lightning restores a resumed run's weights and optimizer state inside fit, where a
    checkpoint that this version's model or optimizer cannot take (a run made by an older attnexp:
    a layer of another shape, the parameters split into other groups) ended in its traceback. Both
    are tried here first, the weights on the task (fit restores them again) and the optimizer
    state on a throwaway optimizer, so that is said before anything is trained."""
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
            f"it with the attnexp version that made it, or start a new run (drop resume=)"
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
            f"loads the weights only); or start a new run (drop resume=)"
        ) from err


def one_line(err: BaseException) -> str:
    """torch's reason in one line: its first two (a size mismatch per parameter may follow)."""
    lines = message_lines(err)
    text = " ".join(lines[:2])
    return f"{text} ..." if len(lines) > 2 else text


def validation_at(record: RunRecord, step: int) -> dict | None:
    """val/* of the validation at global step `step` (the last one there), from the record."""
    rows = [row for row in record.data["validations"] if row["step"] == step]
    return {k: v for k, v in rows[-1].items() if k.startswith("val/")} if rows else None


def with_val_of(
    metrics: dict, best_val: dict | None, last_val: dict[str, float], record: RunRecord
) -> dict:
    """val/* of the tested (best) checkpoint, and the last validation's (`last_val`, from the
    record: a resumed attempt that trained on past the run's last validation validated nothing)
    as val/*_last; `metrics`' own val/* are dropped."""
    last = {f"{k}_last": v for k, v in last_val.items()}
    rest = {k: v for k, v in metrics.items() if not k.startswith("val/")}
    if best_val is None:
        record.warn("no validation recorded at the best checkpoint's step: only val/*_last")
        best_val = {}
    return {**rest, **best_val, **last}


def best_score(checkpoint: ModelCheckpoint, best_path: str) -> float:
    """The monitored value of the best checkpoint. ddp_spawn hands the main process only the
    best path, so then the score comes from the checkpoint's own callback state."""
    if checkpoint.best_model_score is not None:
        return float(checkpoint.best_model_score)
    state = torch.load(best_path, map_location="cpu", weights_only=True)
    for key, value in state.get("callbacks", {}).items():
        if key.startswith("ModelCheckpoint") and value.get("best_model_score") is not None:
            return float(value["best_model_score"])
    raise RuntimeError(f"no best_model_score in {best_path}")


# The parts of a config that define the experiment (not where files go or how they are logged).
HPARAM_KEYS = ("seed", "data", "model", "scorer", "optimizer", "scheduler", "task", "trainer")
# Keys that differ between runs without changing what they compute, or repeat another section
# (the task holds the optimizer and scheduler configs again, a model with a scorer the scorer's).
HPARAM_NOISE = {
    "trainer": ("default_root_dir", "enable_progress_bar"),
    "data": ("num_workers",),
    "task": ("optimizer", "scheduler"),
    "model": ("scorer",),
}


def run_hparams(cfg: DictConfig, choices: dict, data_source: str) -> dict:
    """A run's settings for TensorBoard's HPARAMS tab: the config sections that define the
    experiment, less HPARAM_NOISE, plus what tells runs apart at a glance: the options chosen and
    the data actually read ("auto" in the config may have been the full dataset or the sample)."""
    config = OmegaConf.to_container(cfg, resolve=True)
    hparams = {key: config[key] for key in HPARAM_KEYS if key in config}
    for section, keys in HPARAM_NOISE.items():
        for key in keys:
            hparams.get(section, {}).pop(key, None)
    return {**hparams, "choice": dict(choices), "data_source": data_source}


def flatten_hparams(tree: dict) -> dict:
    """Nested config -> {"model.hidden_size": 256, ...} with TensorBoard-friendly leaf types (an
    empty section is no setting)."""
    return {
        name: value if isinstance(value, int | float | str | bool) else str(value)
        for name, value in flat_config(tree).items()
        if value != {}
    }


def run(cfg: DictConfig) -> dict[str, float]:
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    resume_if_requeued(cfg, run_dir)
    if (
        hydra_cfg.mode == RunMode.MULTIRUN
        and not is_other_rank()
        and holds_run(run_dir)
        and not cfg.get("resume")
    ):
        raise ConfigError(
            f"hydra.sweep.subdir={hydra_cfg.sweep.subdir} puts job {hydra_cfg.job.num} into "
            f"{run_dir}, which holds a run already (an earlier job's, or this job's from an "
            f"earlier launch): every job needs a new dir of its own (put ${{hydra.job.num}} in "
            f"hydra.sweep.subdir, or leave hydra.sweep.subdir out); to continue that run, resume "
            f"it on its own: python -m attnexp <its overrides> {override_arg('resume', run_dir)}"
        )
    if is_other_rank():  # a re-launched DDP rank works under its rank 0's lock
        leave_log_to_rank_zero()
        return record_and_run(cfg, run_dir, hydra_cfg)
    with owning(run_dir, "train"):
        check_claimed(run_dir, resuming=cfg.get("resume") not in NO_RESUME and is_run(run_dir))
        write_run_config(run_dir, cfg, hydra_cfg, list(hydra_cfg.overrides.task))
        return record_and_run(cfg, run_dir, hydra_cfg)


def leave_log_to_rank_zero() -> None:
    """A rank > 0 shares rank 0's run dir: its log goes to its stderr (SLURM's, submitit's file
    per task), not into the run's train.log, which Hydra opened in every rank."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        root.removeHandler(handler)
        handler.close()


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


def disk_full(err: BaseException, run_dir: Path) -> ConfigError | None:
    """A write that found no space left (anywhere in `err`'s chain), said in one paragraph."""
    seen = set()  # a chain may loop back on itself
    while err is not None and id(err) not in seen:
        if isinstance(err, OSError) and err.errno == errno.ENOSPC:
            break
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    else:
        return None
    usage = shutil.disk_usage(run_dir)
    then = (
        f"resume the run: python -m attnexp <its overrides> {override_arg('resume', run_dir)}"
        if (run_dir / LAST_CKPT).is_file()
        else "start it again (it saved no checkpoint to resume from)"
    )
    return ConfigError(
        f"no space left on the disk holding {run_dir} ({usage.free / 2**20:.1f} MiB free of "
        f"{usage.total / 2**20:.0f} MiB) while writing {err.filename or 'a file'}; nothing "
        f"half-written was kept under a final name. Free space there (or give "
        f"paths.log_dir=<a folder on another disk>), then {then}"
    )


def record_and_run(cfg: DictConfig, run_dir: Path, hydra_cfg) -> dict[str, float]:
    record = RunRecord(
        run_dir,
        seed=cfg.get("seed"),
        overrides=list(hydra_cfg.overrides.task),
        write=not is_other_rank(),
    )
    record.start()
    job = scheduler_job()
    if job is not None:  # a requeued job tells its own run by it
        record.update(**{RECORD_KEY: job})
    try:
        metrics = fit_and_test(cfg, run_dir, record)
    except BaseException as err:  # Ctrl-C and crashes alike leave status=failed behind
        refusal = spawned_refusal(err) or disk_full(err, run_dir)
        record.fail(refusal or err)
        if isinstance(err, Preempted):
            err.hand_over()  # the scheduler requeues the job; this process ends
        if refusal is not None:
            raise refusal from err
        if isinstance(err, SIGTERMException):  # a SystemExit with code 0: make it a failure
            raise SystemExit(128 + signal.SIGTERM) from err
        raise
    record.complete(metrics, status=PRUNED if record.data.get("pruned") else COMPLETED)
    log.info("run dir: %s", run_dir)
    return metrics
