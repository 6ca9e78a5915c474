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
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig
from pytorch_lightning.accelerators import CPUAccelerator
from pytorch_lightning.utilities.exceptions import SIGTERMException

from attnexp.errors import ConfigError, spawned_refusal
from attnexp.files import allow_checkpoint_globals
from attnexp.runner.build import build, check_data_dir, resolved_data_dir
from attnexp.runner.config import register_resolvers
from attnexp.runner.final_metrics import (
    best_score,
    checkpoint_step,
    last_epoch_metrics,
    scalar_metrics,
    validation_at,
    with_val_of,
)
from attnexp.runner.hparams import flatten_hparams, run_hparams
from attnexp.runner.resume import (
    check_resume_data,
    check_resume_fits,
    resume_if_requeued,
    resume_point,
)
from attnexp.runner.steps import check_kernels, record_data, recording, warn_about_data
from attnexp.runner.threads import set_threads
from attnexp.runner.trainer import check_trainer_settings, device_name, make_trainer, monitors
from attnexp.runs.dirs import check_claimed
from attnexp.runs.layout import holds_run, is_run, write_run_config
from attnexp.runs.lock import owning
from attnexp.runs.overrides import override_arg
from attnexp.runs.ranks import is_other_rank
from attnexp.runs.record import COMPLETED, LAST_CKPT, PRUNED, WORKER_KEYS, RunRecord
from attnexp.runs.requeue import RECORD_KEY, scheduler_job
from attnexp.runs.resume import NO_RESUME
from attnexp.runs.sweeps import check_strategy
from attnexp.tasks import ClassificationTask
from attnexp.tasks.callbacks import best_checkpoint_callback, last_validation
from attnexp.tasks.loggers import log_final
from attnexp.tasks.preemption import Preempted, StopOnPreemption

log = logging.getLogger(__name__)

register_resolvers()


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
    """Instantiate, fit, test, merge the metrics; what each step decides goes into `record`."""
    check_trainer_settings(cfg)
    if cfg.seed is None:
        draw_seed(cfg, record)
    pl.seed_everything(cfg.seed, workers=True)
    allow_checkpoint_globals()  # Lightning's weights-only loads of resume and test
    hydra_cfg = HydraConfig.get()
    choices, overrides = dict(hydra_cfg.runtime.choices), list(hydra_cfg.overrides.task)
    check_strategy(cfg.trainer.get("strategy"), hydra_cfg.mode == RunMode.MULTIRUN)
    resume_ckpt, resume_step = resume_point(cfg, run_dir)
    check_data_dir(cfg.paths.data_dir, overrides)
    # Built first: a trainer.* setting Lightning refuses is said before any data is loaded.
    trainer = make_trainer(cfg, record, resume_step)
    on_cpu = isinstance(trainer.accelerator, CPUAccelerator)
    record.update(
        device=device_name(trainer), torch_threads=set_threads(cfg.trainer.threads, on_cpu)
    )
    datamodule, task = build(cfg, choices, overrides=overrides)
    check_kernels(trainer, task)
    if resume_ckpt is not None:
        check_resume_data(record.earlier_data, datamodule, cfg.paths.data_dir, cfg.resume)
        check_resume_fits(task, run_dir, cfg.resume, trainer.world_size)
    record_training_data(cfg, record, datamodule, task, choices)
    datamodule.save_artifacts(str(run_dir))
    if resume_ckpt is not None:
        log.info("resuming from %s (global step %d)", resume_ckpt, resume_step)
        # an interrupted attempt's validations after its checkpoint are done again
        kept = [row for row in record.data["validations"] if row["step"] <= resume_step]
        record.update(validations=kept)
    fit(cfg, trainer, task, datamodule, resume_ckpt, run_dir)
    metrics, best = fitted_metrics(trainer, record)
    if record.data.get("pruned"):
        log.info("the trial was pruned: the run ends untested")
    elif cfg.get("test", True):
        metrics.update(test(trainer, task, datamodule, best, record))
    log_final_metrics(cfg, trainer, record, datamodule.source, metrics)
    return metrics


def record_training_data(
    cfg: DictConfig, record: RunRecord, datamodule, task: ClassificationTask, choices: dict
) -> None:
    """The data the run trains on, the options it was composed of, its size, into `record`."""
    record_data(
        record,
        datamodule,
        resolved_data_dir(cfg.paths.data_dir),
        data_hash=datamodule.data_hash,
        choices={k: v for k, v in choices.items() if not k.startswith("hydra")},
        num_params=sum(p.numel() for p in task.model.parameters()),
    )
    if getattr(datamodule, "summary", None):  # split sizes and checks (translation data)
        record.update(data_summary=datamodule.summary)
    warn_about_data(record, datamodule, "trained")


def fit(
    cfg: DictConfig,
    trainer: pl.Trainer,
    task: ClassificationTask,
    datamodule,
    resume_ckpt: Path | None,
    run_dir: Path,
) -> None:
    """trainer.fit; a failure inside Lightning is logged with the settings that name metrics."""
    preemption = next(c for c in trainer.callbacks if isinstance(c, StopOnPreemption))
    try:
        with preemption.catching(trainer):
            trainer.fit(task, datamodule=datamodule, ckpt_path=resume_ckpt, weights_only=True)
    except (ConfigError, Preempted):  # ours say what to change; the scheduler requeues the job
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


def fitted_metrics(trainer: pl.Trainer, record: RunRecord) -> tuple[dict[str, float], str]:
    """(the metrics after fit, val/* those of the best checkpoint's validation; the best
    checkpoint's path, "" where there is none)."""
    record.reload(*WORKER_KEYS)  # ddp_spawn: the rank-0 worker recorded them
    # A run resumed after its training had ended (killed while testing) trains nothing more and
    # logs nothing: its last epoch's metrics come from the record, as they were logged.
    metrics = {**last_epoch_metrics(record), **scalar_metrics(trainer.callback_metrics)}
    checkpoint = best_checkpoint_callback(trainer)
    best = checkpoint.best_model_path if checkpoint is not None else ""
    if not best:
        record.warn(
            "no best checkpoint (checkpointing off, e.g. fast_dev_run, or no validation, e.g. "
            "trainer.limit_val_batches=0): testing the final weights"
        )
        return metrics, best
    best_val = validation_at(record, checkpoint_step(best))
    metrics = with_val_of(metrics, best_val, last_validation(record), record)
    metrics[f"{checkpoint.monitor}_best"] = best_score(checkpoint, best)
    record.record_best(best)
    return metrics, best


def test(
    trainer: pl.Trainer, task: ClassificationTask, datamodule, best: str, record: RunRecord
) -> dict[str, float]:
    """test/* of the best checkpoint (the final weights where there is none)."""
    # Lightning's table has a column per test set: for the bags' 14, the summary says more
    verbose = not datamodule.test_set_names
    trainer.test(
        task, datamodule=datamodule, ckpt_path=best or None, verbose=verbose, weights_only=True
    )
    # test/* only: under ddp_spawn the main process's callback_metrics still hold the last
    # validation's val/*, which would replace the best checkpoint's
    tested = scalar_metrics(trainer.callback_metrics)
    record.reload(*WORKER_KEYS)  # ddp_spawn: the notes the test's rank-0 worker recorded
    if task.results:  # sacrebleu signatures, probe translations
        record.update(translation=task.results)
    return {k: v for k, v in tested.items() if k.startswith("test/")}


def log_final_metrics(
    cfg: DictConfig, trainer: pl.Trainer, record: RunRecord, data_source: str, metrics: dict
) -> None:
    """Each run's config with its final metrics (TensorBoard's HPARAMS tab, MLflow's params). The
    metrics are written under tags of their own (final/...): under val/acc the best checkpoint's
    value would be a stray point on the per-validation curve."""
    hparams = flatten_hparams(run_hparams(cfg, record.data.get("choices", {}), data_source))
    final = {f"final/{k}": v for k, v in metrics.items() if k.startswith(("val/", "test/"))}
    for logger in trainer.loggers:
        log_final(logger, hparams, final, trainer.global_step)


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
    try:
        with recording(
            record,
            refusal_of=lambda err: spawned_refusal(err) or disk_full(err, run_dir),
            after_failure=hand_over_if_preempted,
        ):
            job = scheduler_job()
            if job is not None:  # a requeued job tells its own run by it
                record.update(**{RECORD_KEY: job})
            metrics = fit_and_test(cfg, run_dir, record)
    except SIGTERMException as err:  # a SystemExit with code 0: make it a failure
        raise SystemExit(128 + signal.SIGTERM) from err
    record.complete(metrics, status=PRUNED if record.data.get("pruned") else COMPLETED)
    log.info("run dir: %s", run_dir)
    return metrics


def hand_over_if_preempted(err: BaseException) -> None:
    if isinstance(err, Preempted):
        err.hand_over()  # the scheduler requeues the job; this process ends
