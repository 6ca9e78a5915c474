"""The settings of a run that can be judged from its config alone, before torch is imported and
before a run dir is made: the command line's own checks (`attnexp.cli.train`) and the trainer's
(`attnexp.runner.trainer.check_settings`) both call these."""

from omegaconf import DictConfig, OmegaConf

from attnexp.errors import ConfigError, require_seed
from attnexp.runner.threads import available_cores, check_threads

SEED_KEYS = ("seed", "data.seed", "data.split_seed")  # the run's data and weights follow them


def check_values(cfg: DictConfig) -> None:
    """Values that no run can use, whatever the machine."""
    for key in SEED_KEYS:
        require_seed(key, OmegaConf.select(cfg, key, default=None))
    epochs = cfg.trainer.get("max_epochs")
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
    check_val_interval(cfg.trainer)
    check_threads(cfg.trainer.get("threads", "auto"))


def check_devices(trainer_cfg: DictConfig, on_cpu: bool) -> None:
    """CPU processes beyond the cores this process may use only wait for each other: 4 DDP
    processes on 2 cores run slower than 2. (More GPUs than there are, Lightning refuses.)"""
    devices, cores = trainer_cfg.get("devices"), available_cores()
    if on_cpu and type(devices) is int and devices > cores:
        raise ConfigError(
            f"trainer.devices={devices} starts {devices} CPU processes, and this machine gives "
            f"this run {cores} cores (set trainer.devices={cores} or fewer)"
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
