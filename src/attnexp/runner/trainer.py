"""The Lightning Trainer of a run: its callbacks and loggers from conf/, and the trainer.* and
callbacks.* settings Lightning or torch would refuse with a traceback from deep inside fit(),
checked before anything is loaded."""

import pytorch_lightning as pl
import torch
from hydra.errors import InstantiationException
from hydra.utils import get_object, instantiate
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint
from pytorch_lightning.utilities.exceptions import MisconfigurationException

from attnexp.errors import ConfigError, require_seed
from attnexp.runner.build import instantiate_checked
from attnexp.runner.load import SEED_KEYS
from attnexp.runs.record import RunRecord
from attnexp.tasks.callbacks import (
    EndSpawnedProcessGroup,
    EpochHistory,
    FiniteLosses,
    MovedRunCheckpoints,
)
from attnexp.tasks.compile import compile_callbacks, lightning_settings
from attnexp.tasks.loggers import RESUMABLE, start_logs

TRAINER_REFUSALS = (TypeError, ValueError, MisconfigurationException)  # how Lightning says no


def make_trainer(cfg: DictConfig, record: RunRecord, resume_step: int) -> pl.Trainer:
    """The Trainer with the configured callbacks and loggers (logging from `resume_step` on)."""
    # with no validation, Lightning's own rule (save at epoch ends) is the one that saves at all
    every_batch = (
        type(cfg.trainer.get("val_check_interval")) is int
        and cfg.trainer.val_check_interval == 1
        and cfg.trainer.get("limit_val_batches") != 0
    )
    callbacks = (
        [
            make_callback(name, c, validates_every_batch=every_batch)
            for name, c in cfg.callbacks.items()
            if c is not None
        ]
        + [
            EpochHistory(record),
            FiniteLosses(),  # a loss that turned NaN ends the run, not its test of NaN weights
            EndSpawnedProcessGroup(),  # ddp_spawn: ends the ranks' process group at each stage's end
            MovedRunCheckpoints(),  # resume= of a run dir that was moved or copied
        ]
        + compile_callbacks(cfg.trainer)
    )
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
        settings = lightning_settings(cfg.trainer)
        return instantiate(settings, callbacks=callbacks, logger=loggers, **checkpointing)
    except InstantiationException as err:
        if not isinstance(err.__cause__, TRAINER_REFUSALS):
            raise
        raise refused_settings(err.__cause__, "trainer", "train") from err.__cause__


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
    check_val_interval(cfg.trainer)
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
