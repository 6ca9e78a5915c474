"""`python -m attnexp <overrides>`: train, then test the best checkpoint; record everything.

Every run writes, in its own run dir: the composed config (.hydra/), checkpoints/ (best and last),
tb/ (TensorBoard), train.log and metrics.json.
"""

import importlib.util
import logging
import os
import random
import re
import signal
import sys
from pathlib import Path

import hydra
import pytorch_lightning as pl
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.types import RunMode
from hydra.utils import get_object, instantiate
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import TensorBoardLogger
from pytorch_lightning.utilities.exceptions import MisconfigurationException, SIGTERMException

from attnexp.build import build, check_data_dir, instantiate_checked, resolved_data_dir
from attnexp.checkpoints import SEED_KEYS
from attnexp.config import register_resolvers
from attnexp.errors import ConfigError, exit_with, require_seed
from attnexp.files import TORCH_LOAD_ERRORS
from attnexp.overrides import unknown_keys
from attnexp.runs import (
    LAST_CKPT,
    RunRecord,
    holds_run,
    is_other_rank,
    natural_key,
    override_arg,
)
from attnexp.sweeps import check_strategy
from attnexp.tasks.callbacks import (
    EndSpawnedProcessGroup,
    EpochHistory,
    MovedRunCheckpoints,
    best_checkpoint_callback,
)
from attnexp.tasks.loggers import RESUMABLE, start_logs

log = logging.getLogger(__name__)
TRAINER_REFUSALS = (TypeError, ValueError, MisconfigurationException)  # how Lightning says no
FAILED_JOBS: list[str] = []  # failed jobs of this process's multirun, for the exit status

register_resolvers()


def scalar_metrics(metrics: dict) -> dict[str, float]:
    return {
        k: float(v) for k, v in sorted(metrics.items()) if torch.is_tensor(v) and v.numel() == 1
    }


def device_name(trainer: pl.Trainer) -> str:
    device = trainer.strategy.root_device
    name = str(device)
    if device.type == "cuda":
        name += f" ({torch.cuda.get_device_name(device)})"
    if trainer.world_size > 1:
        name += f" x{trainer.world_size}"
    return name


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
    check_settings(cfg)
    if cfg.seed is None:
        draw_seed(cfg, record)
    pl.seed_everything(cfg.seed, workers=True)
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
    record.update(device=device_name(trainer))
    datamodule, task = build(cfg, choices, overrides=overrides)
    record.update(
        data_source=datamodule.source,
        data_dir=resolved_data_dir(cfg.paths.data_dir),
        choices={k: v for k, v in choices.items() if not k.startswith("hydra")},
        num_params=sum(p.numel() for p in task.model.parameters()),
    )
    if datamodule.source == "sample":
        record.warn("data: trained on the embedded sample, not the full dataset")
    for note in datamodule.notes:
        record.warn(f"data: {note}")
    datamodule.save_artifacts(str(run_dir))

    if resume_ckpt is not None:
        log.info("resuming from %s (global step %d)", resume_ckpt, resume_step)
    try:
        trainer.fit(task, datamodule=datamodule, ckpt_path=resume_ckpt)
    except MisconfigurationException as err:
        refusal = monitor_refusal(err, cfg.callbacks)
        if refusal is None:
            raise
        raise refusal from err
    record.reload("history", "validations")  # ddp_spawn: the rank-0 worker recorded them
    metrics = scalar_metrics(trainer.callback_metrics)

    checkpoint = best_checkpoint_callback(trainer)
    best = checkpoint.best_model_path if checkpoint is not None else ""
    if best:
        metrics = with_val_of(metrics, validation_at(record, checkpoint_step(best)), record)
        metrics[f"{checkpoint.monitor}_best"] = best_score(checkpoint, best)
        record.record_best(best)
    else:
        record.warn(
            "no best checkpoint (checkpointing off, e.g. fast_dev_run, or no validation, e.g. "
            "trainer.limit_val_batches=0): testing the final weights"
        )
    if cfg.get("test", True):
        # Lightning's table has a column per test set: for the bags' 14, the summary says more
        verbose = not datamodule.test_set_names
        trainer.test(task, datamodule=datamodule, ckpt_path=best or None, verbose=verbose)
        metrics.update(scalar_metrics(trainer.callback_metrics))

    config = OmegaConf.to_container(cfg, resolve=True)
    hparams = {key: config[key] for key in HPARAM_KEYS if key in config}
    for tb_logger in [lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]:
        # The HPARAMS tab: each run's config with its final metrics. Lightning also writes these
        # metrics as scalars at step 0, so they get their own tags (final/...) rather than adding a
        # stray step-0 point to the per-epoch val/acc curve.
        final = {f"final/{k}": v for k, v in metrics.items() if k.startswith(("val/", "test/"))}
        tb_logger.log_hyperparams(flatten_hparams(hparams), metrics=final)
    return metrics


def make_trainer(cfg: DictConfig, record: RunRecord, resume_step: int) -> pl.Trainer:
    """The Trainer with the configured callbacks and loggers (logging from `resume_step` on)."""
    callbacks = [make_callback(name, c) for name, c in cfg.callbacks.items() if c is not None] + [
        EpochHistory(record),
        EndSpawnedProcessGroup(),  # ddp_spawn: ends the ranks' process group at each stage's end
        MovedRunCheckpoints(),  # resume= of a run dir that was moved or copied
    ]
    loggers = [
        instantiate(c, **purge_setting(c, resume_step))
        for c in (cfg.get("logger") or {}).values()
        if c is not None
    ]
    start_logs(loggers)
    # Without a configured ModelCheckpoint, Lightning would add one that monitors nothing (so has
    # no best checkpoint) and writes into the logger's dir: no checkpoints then.
    checkpointing = (
        {}
        if any(isinstance(c, ModelCheckpoint) for c in callbacks)
        else {"enable_checkpointing": False}
    )
    try:
        return instantiate(cfg.trainer, callbacks=callbacks, logger=loggers, **checkpointing)
    except InstantiationException as err:
        if not isinstance(err.__cause__, TRAINER_REFUSALS):
            raise
        settings = {key: value for key, value in cfg.trainer.items() if key != "_target_"}
        raise refused_settings(err.__cause__, settings, "train") from err.__cause__


def make_callback(name: str, callback_cfg: DictConfig) -> pl.Callback:
    """callbacks.<name>, with Lightning's refusal of a setting (a ModelCheckpoint mode=foo, say)
    said as a ConfigError that names callbacks.<name>.<key>."""
    try:
        return instantiate_checked(callback_cfg)
    except InstantiationException as err:
        if not isinstance(err.__cause__, TRAINER_REFUSALS):
            raise
        settings = {key: value for key, value in callback_cfg.items() if key != "_target_"}
        raise refused_settings(err.__cause__, settings, "train", f"callbacks.{name}") from None


def refused_settings(
    err: Exception, settings: dict, command: str, prefix: str = "trainer"
) -> ConfigError:
    """Lightning's refusal of `settings` (the Trainer's, or a callback's under `prefix`) as a
    ConfigError that names the settings its message names (all of them when it names none)."""
    named = [
        key for key in settings if re.search(rf"\b{re.escape(key)}\b", str(err), re.IGNORECASE)
    ]
    shown = ", ".join(f"{prefix}.{key}={settings[key]}" for key in named or settings)
    return ConfigError(f"{command}: Lightning refuses {shown}: {err} (set the one it names)")


def monitor_refusal(
    err: MisconfigurationException, callbacks_cfg: DictConfig
) -> ConfigError | None:
    """A checkpoint callback's `monitor` that names no logged metric (Lightning finds out at the
    first validation) as a ConfigError naming the setting and the metrics there are."""
    found = re.search(r"monitor='([^']*)'\)` could not find .* metrics: (\[[^]]*\])", str(err))
    if found is None:
        return None
    monitor, logged = found.groups()
    names = [n for n, c in callbacks_cfg.items() if c is not None and c.get("monitor") == monitor]
    key = f"callbacks.{names[0]}.monitor" if names else "monitor"
    return ConfigError(
        f"{key}={monitor} is not a metric the run logs at validation (it logs {logged}; set "
        f"{key}=val/acc, for instance)"
    )


def check_settings(cfg: DictConfig) -> None:
    """Settings that torch or Lightning would refuse with a traceback from deep inside fit()."""
    epochs = cfg.trainer.get("max_epochs")
    for key in SEED_KEYS:
        require_seed(key, OmegaConf.select(cfg, key, default=None))
    if epochs is not None and (type(epochs) is not int or epochs < -1):
        raise ConfigError(
            f"trainer.max_epochs={epochs!r} must be a whole number of epochs (-1: no limit)"
        )
    # Lightning takes these as "train nothing": the run would test its untrained weights.
    nothing = [
        key
        for key in ("max_epochs", "max_steps", "limit_train_batches")
        if cfg.trainer.get(key) in (0, 0.0) and type(cfg.trainer.get(key)) is not bool
    ]
    if nothing:
        key = nothing[0]
        raise ConfigError(
            f"trainer.{key}=0 trains nothing: the run would test its untrained model (set "
            f"trainer.{key} >= 1; to test a trained checkpoint: python -m attnexp.evaluate "
            f"ckpt_path=<run dir>)"
        )
    lr = cfg.get("optimizer", {}).get("lr")
    if lr is not None and (type(lr) not in (int, float) or lr <= 0):
        raise ConfigError(f"optimizer.lr={lr!r} must be a positive number (e.g. optimizer.lr=1e-3)")
    accelerator = str(cfg.trainer.get("accelerator"))
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"trainer.accelerator={accelerator}: this machine sees no CUDA device (use "
            f"trainer=cpu, or trainer=default, which takes what there is)"
        )
    check_val_interval(cfg.trainer)


def check_val_interval(trainer_cfg: DictConfig) -> None:
    """Lightning stops with a traceback when a step interval between validations is longer than
    the epoch that `limit_train_batches` leaves, or on a zero epoch interval (a modulo by 0)."""
    every = trainer_cfg.get("check_val_every_n_epoch")
    if every is not None and (type(every) is not int or every < 1):
        raise ConfigError(
            f"trainer.check_val_every_n_epoch={every} must be a whole number of epochs >= 1 "
            f"(null: validate by trainer.val_check_interval steps only; to validate never, set "
            f"trainer.limit_val_batches=0)"
        )
    interval = trainer_cfg.get("val_check_interval")
    limit = trainer_cfg.get("limit_train_batches")
    if (type(interval) is int and interval < 1) or (type(interval) is float and interval <= 0):
        raise ConfigError(
            f"trainer.val_check_interval={interval} never validates: give a number of training "
            f"batches >= 1 or a fraction of an epoch in (0, 1] (set trainer.val_check_interval=1.0 "
            f"to validate once per epoch)"
        )
    if type(interval) is int and type(limit) is int and limit < interval:
        raise ConfigError(
            f"trainer.val_check_interval={interval} validates every {interval} training batches, "
            f"but trainer.limit_train_batches={limit} ends each epoch before the first check (set "
            f"trainer.val_check_interval=1.0 to validate once per epoch, or limit_train_batches "
            f">= {interval})"
        )


def purge_setting(logger_cfg: DictConfig, resume_step: int) -> dict[str, int]:
    """TensorBoard and CSV logs drop what an interrupted attempt logged at or after the step its
    resumed run goes on from (tasks/loggers.py); other loggers are left as configured."""
    target_path = logger_cfg.get("_target_")
    try:
        target = get_object(target_path) if isinstance(target_path, str) else None
    except (ImportError, ValueError):  # instantiate() says what is wrong
        return {}
    # a _target_ may be any callable that makes a logger (a factory function, say)
    resumable = isinstance(target, type) and issubclass(target, RESUMABLE)
    return {"purge_step": resume_step} if resumable else {}


def checkpoint_step(path: str | Path) -> int:
    """The global step a Lightning checkpoint was saved at (memory-mapped: reads little)."""
    return int(torch.load(path, map_location="cpu", weights_only=False, mmap=True)["global_step"])


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


def validation_at(record: RunRecord, step: int) -> dict | None:
    """val/* of the validation at global step `step` (the last one there), from the record."""
    rows = [row for row in record.data["validations"] if row["step"] == step]
    return {k: v for k, v in rows[-1].items() if k.startswith("val/")} if rows else None


def with_val_of(metrics: dict, best_val: dict | None, record: RunRecord) -> dict:
    """val/* of the tested (best) checkpoint, and the last validation's as val/*_last; after fit,
    `callback_metrics` holds the last validation's only."""
    last = {f"{k}_last": v for k, v in metrics.items() if k.startswith("val/")}
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
    state = torch.load(best_path, map_location="cpu", weights_only=False)
    for key, value in state.get("callbacks", {}).items():
        if key.startswith("ModelCheckpoint") and value.get("best_model_score") is not None:
            return float(value["best_model_score"])
    raise RuntimeError(f"no best_model_score in {best_path}")


# The parts of a config that define the experiment (not where files go or how they are logged).
HPARAM_KEYS = ("seed", "data", "model", "scorer", "optimizer", "scheduler", "task", "trainer")


def flatten_hparams(tree: dict, prefix: str = "") -> dict:
    """Nested config -> {"model.hidden_size": 256, ...} with TensorBoard-friendly leaf types."""
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten_hparams(value, f"{name}."))
        else:
            flat[name] = value if isinstance(value, int | float | str | bool) else str(value)
    return flat


def run(cfg: DictConfig) -> dict[str, float]:
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    if hydra_cfg.mode == RunMode.MULTIRUN and not is_other_rank() and holds_run(run_dir):
        raise ConfigError(
            f"hydra.sweep.subdir={hydra_cfg.sweep.subdir} puts job {hydra_cfg.job.num} into "
            f"{run_dir}, which holds a run already (an earlier job's, or this job's from an "
            f"earlier launch): every job needs a new dir of its own (put ${{hydra.job.num}} in "
            f"hydra.sweep.subdir, or leave hydra.sweep.subdir out); to continue that run, resume "
            f"it on its own: python -m attnexp <its overrides> {override_arg('resume', run_dir)}"
        )
    record = RunRecord(
        run_dir,
        seed=cfg.get("seed"),
        overrides=list(hydra_cfg.overrides.task),
        write=not is_other_rank(),
    )
    record.start()
    try:
        metrics = fit_and_test(cfg, run_dir, record)
    except BaseException as err:  # Ctrl-C and crashes alike leave status=failed behind
        record.fail(err)
        if isinstance(err, SIGTERMException):  # a SystemExit with code 0: make it a failure
            raise SystemExit(128 + signal.SIGTERM) from err
        raise
    record.complete(metrics)
    log.info("run dir: %s", run_dir)
    return metrics


@hydra.main(version_base="1.3", config_path="pkg://attnexp.conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    try:
        metrics = run(cfg)
    except Exception as err:
        if HydraConfig.get().mode != RunMode.MULTIRUN:
            if isinstance(err, ConfigError):
                exit_with(err)
            raise
        # One failed job must not end the sweep: it is recorded (status=failed) and counted.
        job = HydraConfig.get().job.num
        if isinstance(err, ConfigError):  # the user's settings: the message says it all
            log.error("job %s failed; the sweep goes on. error: %s", job, err)
        else:
            log.exception("job %s failed; the sweep goes on", job)
        FAILED_JOBS.append(HydraConfig.get().runtime.output_dir)
        return None
    if HydraConfig.get().mode == RunMode.RUN and not is_other_rank():  # one summary per run
        print(summary(metrics, HydraConfig.get().runtime.output_dir))
    objective = cfg.get("optimized_metric")
    return metrics.get(objective) if objective else None


def summary(metrics: dict[str, float], run_dir: str) -> str:
    keys = sorted((k for k in metrics if k.startswith(("test/acc", "val/acc"))), key=natural_key)
    lines = [f"  {k:<24} {metrics[k]:.4f}" for k in keys]
    return "\n".join([f"run dir: {run_dir}", *lines])


def plugin_installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # not even its namespace package
        return False


def missing_sweeper(args: list[str]) -> list[str]:
    """conf/hparams_search/ options use the Optuna sweeper, a Hydra plugin from an extra: without
    it Hydra says only "Could not find 'hydra/sweeper/optuna'"."""
    searches = [a for a in args if a.lstrip("+").startswith("hparams_search=")]
    if not searches or plugin_installed("hydra_plugins.hydra_optuna_sweeper"):
        return []
    return [
        f"{searches[0]} runs on the Optuna sweeper, which is not installed: pip install -e "
        f"'.[optuna]' (from a source checkout), or pip install 'attnexp[optuna]'"
    ]


def cli() -> None:
    try:
        main()
    except SystemExit as end:
        # Status 1: Hydra printed an error it caught. A key it could not override gets named
        # with the keys there are (Hydra's advice, `+key=...`, would add one nothing reads).
        messages = unknown_keys("train", sys.argv[1:]) if end.code == 1 else []
        if end.code == 1 and not messages:
            messages = missing_sweeper(sys.argv[1:])
        for message in messages:
            print(f"error: {message}", file=sys.stderr)
        if messages:
            raise SystemExit(2) from None
        raise
    if FAILED_JOBS:
        print(f"{len(FAILED_JOBS)} job(s) failed:", *FAILED_JOBS, sep="\n  ", file=sys.stderr)
        sys.exit(min(len(FAILED_JOBS), 100))
