"""The Lightning Trainer of a run: its callbacks and loggers from conf/, and the trainer.* and
callbacks.* settings Lightning or torch would refuse with a traceback from deep inside fit(),
checked before anything is loaded."""

import copy
from pathlib import Path

import pytorch_lightning as pl
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.utils import get_object, instantiate
from omegaconf import DictConfig, open_dict
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint
from pytorch_lightning.utilities.exceptions import MisconfigurationException

from attnexp.errors import ConfigError
from attnexp.runner.build import instantiate_checked
from attnexp.runner.cluster import check_slurm_tasks, slurm_plugins
from attnexp.runner.settings import check_devices, check_values
from attnexp.runs.record import LAST_CKPT, RunRecord
from attnexp.runs.search import trial_identity
from attnexp.tasks.callbacks import (
    EndSpawnedProcessGroup,
    EpochHistory,
    FiniteLosses,
    MovedRunCheckpoints,
)
from attnexp.tasks.checkpoint_io import AtomicCheckpointIO
from attnexp.tasks.compile import compile_callbacks
from attnexp.tasks.loggers import RESUMABLE, start_logs
from attnexp.tasks.preemption import StopOnPreemption
from attnexp.tasks.progress import progress_callbacks, quiet_lightning_tips
from attnexp.tasks.pruning import TrialPruning
from attnexp.tasks.random_state import RandomStateCheckpoint

TRAINER_REFUSALS = (TypeError, ValueError, MisconfigurationException)  # how Lightning says no


def make_trainer(cfg: DictConfig, record: RunRecord, resume_step: int) -> pl.Trainer:
    """The Trainer with the configured callbacks and loggers (logging from `resume_step` on)."""
    # with no validation, Lightning's own rule (save at epoch ends) is the one that saves at all
    every_batch = (
        type(cfg.trainer.get("val_check_interval")) is int
        and cfg.trainer.val_check_interval == 1
        and cfg.trainer.get("limit_val_batches") != 0
    )
    callbacks = [
        make_callback(name, c, validates_every_batch=every_batch)
        for name, c in cfg.callbacks.items()
        if c is not None
    ] + [
        EpochHistory(record),
        FiniteLosses(),  # a loss that turned NaN ends the run, not its test of NaN weights
        EndSpawnedProcessGroup(),  # ddp_spawn: ends the ranks' process group at each stage's end
        MovedRunCheckpoints(),  # resume= of a run dir that was moved or copied
        StopOnPreemption(Path(cfg.paths.output_dir) / LAST_CKPT),  # SLURM's, submitit's signal
        RandomStateCheckpoint(),  # a resumed run draws what the uninterrupted one would have
        *progress_callbacks(cfg.trainer.get("enable_progress_bar", True) is not False),
        *compile_callbacks(cfg.trainer),
        *trial_callbacks(record),
    ]
    quiet_lightning_tips()
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
    settings = lightning_settings(cfg.trainer)
    plugins = [AtomicCheckpointIO(), *slurm_plugins(settings, record)]
    try:
        return instantiate(
            settings,
            callbacks=callbacks,
            logger=loggers,
            plugins=plugins,
            **checkpointing,
        )
    except InstantiationException as err:
        if not isinstance(err.__cause__, TRAINER_REFUSALS):
            raise
        raise refused_settings(err.__cause__, "trainer", "train") from err.__cause__


def trial_callbacks(record: RunRecord) -> list[pl.Callback]:
    """A job of an Optuna search (hparams_search=...) with hydra.sweeper.monitor set: reports to
    its trial at each validation, and stops when the study's pruner prunes it."""
    if not HydraConfig.initialized():
        return []
    hydra_cfg = HydraConfig.get()
    trial = trial_identity(hydra_cfg)
    if trial is None or trial.monitor is None:
        return []
    pruner = hydra_cfg.sweeper.get("pruner")
    return [
        TrialPruning(
            trial.storage,
            trial.study_name,
            trial.number,
            trial.monitor,
            instantiate(pruner) if pruner is not None else None,
            record,
        )
    ]


# trainer.* keys of attnexp's own, not Lightning's: taken out before the Trainer is built.
OWN_TRAINER_KEYS = ("compile", "threads")


def lightning_settings(trainer_cfg: DictConfig) -> DictConfig:
    """trainer.* without OWN_TRAINER_KEYS: what `pl.Trainer` takes. A deep copy keeps its
    parent, so interpolations (${paths.output_dir}) resolve as before."""
    settings = copy.deepcopy(trainer_cfg)
    with open_dict(settings):
        for key in OWN_TRAINER_KEYS:
            settings.pop(key, None)
    return settings


# The setting with which a callback acts at training epoch ends instead of at validations.
EPOCH_END_SETTINGS = (
    (ModelCheckpoint, "save_on_train_epoch_end"),
    (EarlyStopping, "check_on_train_epoch_end"),
)


def make_callback(
    name: str, callback_cfg: DictConfig, validates_every_batch: bool = False
) -> pl.Callback:
    """callbacks.<name>, with Lightning's refusal of a setting (a ModelCheckpoint mode=foo, say)
    said as a ConfigError that names callbacks.<name>.

    Lightning takes trainer.val_check_interval=1 (validate after every batch) for 1.0 (once per
    epoch), and its checkpoint and early-stopping callbacks then act at epoch ends only, never at
    the validations between (EarlyStopping's patience counted epochs): one that leaves its
    epoch-end setting unset acts at validations.
    """
    extra = {
        key: False
        for base, key in EPOCH_END_SETTINGS
        if validates_every_batch
        and is_subclass_target(callback_cfg, base)
        and callback_cfg.get(key) is None
    }
    try:
        return instantiate_checked(callback_cfg, **extra)
    except InstantiationException as err:
        if not isinstance(err.__cause__, TRAINER_REFUSALS):
            raise
        raise refused_settings(err.__cause__, f"callbacks.{name}", "train") from err.__cause__


def refused_settings(err: Exception, section: str, command: str) -> ConfigError:
    """Lightning's refusal of the settings under `section` (trainer, or callbacks.<name>) in its
    own words, with the section it concerns: its message names the argument, not our key."""
    return ConfigError(
        f"{command}: Lightning refuses a {section}.* setting: {type(err).__name__}: {err} (set "
        f"{section}.<the argument it names>=...)"
    )


def monitors(callbacks_cfg: DictConfig) -> list[str]:
    """`callbacks.<name>.monitor=<metric>` of each callback that watches a logged metric."""
    return [
        f"callbacks.{name}.monitor={node.get('monitor')}"
        for name, node in callbacks_cfg.items()
        if node is not None and node.get("monitor") is not None
    ]


def purge_setting(logger_cfg: DictConfig, resume_step: int) -> dict[str, int]:
    """TensorBoard and CSV logs drop what an interrupted attempt logged at or after the step its
    resumed run goes on from (tasks/loggers.py); other loggers are left as configured."""
    return {"purge_step": resume_step} if is_subclass_target(logger_cfg, RESUMABLE) else {}


def is_subclass_target(node: DictConfig, base: type | tuple[type, ...]) -> bool:
    """Whether `node` builds a `base`: False for a _target_ that does not import (instantiate()
    says what is wrong) or that is a factory function, not a class."""
    target_path = node.get("_target_")
    try:
        target = get_object(target_path) if isinstance(target_path, str) else None
    except (ImportError, ValueError):
        return False
    return isinstance(target, type) and issubclass(target, base)


def device_name(trainer: pl.Trainer) -> str:
    device = trainer.strategy.root_device
    name = str(device)
    if device.type == "cuda":
        name += f" ({torch.cuda.get_device_name(device)})"
    if trainer.world_size > 1:
        name += f" x{trainer.world_size}"
    return name


def check_trainer_settings(cfg: DictConfig) -> None:
    """Settings that torch or Lightning would refuse with a traceback from deep inside fit()."""
    check_values(cfg)
    accelerator = str(cfg.trainer.get("accelerator"))
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"trainer.accelerator={accelerator}: this machine sees no CUDA device (use "
            f"trainer=cpu, trainer=ddp_cpu for two CPU processes, or trainer=default, which "
            f"takes what there is)"
        )
    check_cpu_precision(cfg.trainer.get("precision"), accelerator, "trainer.precision")
    distributed = str(cfg.trainer.get("strategy")).startswith("ddp")
    if cfg.trainer.get("sync_batchnorm") and distributed and runs_on_cpu(accelerator):
        # torch's SyncBatchNorm stops in the spawned processes, with a traceback per rank
        raise ConfigError(
            f"trainer.sync_batchnorm=true needs GPUs, and trainer.accelerator={accelerator} runs "
            f"on the CPU here (use trainer=ddp_cpu for DDP on CPU, or set "
            f"trainer.sync_batchnorm=false)"
        )
    check_devices(cfg.trainer, runs_on_cpu(accelerator))
    check_slurm_tasks(cfg.trainer)
    check_early_stopping(cfg)


def check_early_stopping(cfg: DictConfig) -> None:
    """An EarlyStopping callback with no validation: Lightning stops at the first epoch's end
    with an error on its monitor, which reads as a monitor that names no logged metric (with
    val/acc, the value set, as the fix): said before training, with the setting that causes it."""
    limit = cfg.trainer.get("limit_val_batches")
    if limit not in (0, 0.0) or type(limit) is bool:
        return
    for name, callback in (cfg.get("callbacks") or {}).items():
        if callback is not None and is_subclass_target(callback, EarlyStopping):
            raise ConfigError(
                f"callbacks.{name} stops training on {callback.get('monitor')} at validations, "
                f"and trainer.limit_val_batches={limit} runs none (set trainer.limit_val_batches "
                f"to a number of batches > 0, or drop callbacks.{name}: callbacks=default)"
            )


def runs_on_cpu(accelerator: str) -> bool:
    return accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())


def check_cpu_precision(precision: object, accelerator: str, setting: str) -> None:
    """Lightning runs float16 autocast on the CPU as bf16-mixed, with a warning; the run's config
    and record would still say 16-mixed."""
    if str(precision) in ("16", "16-mixed") and runs_on_cpu(accelerator):
        raise ConfigError(
            f"{setting}={precision}: float16 autocast runs on GPUs only, and "
            f"trainer.accelerator={accelerator} runs on the CPU here (set {setting}=bf16-mixed, "
            f"or 32-true)"
        )
