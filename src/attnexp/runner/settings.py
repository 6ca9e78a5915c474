"""The settings of a run that can be judged from its config alone, before torch is imported and
before a run dir is made: the command line's own checks (`attnexp.cli.train`) and the trainer's
(`attnexp.runner.trainer.check_settings`) both call these. What a single key may hold is declared
in `attnexp.schema`; the checks here are those that read two keys together."""

import re
from collections.abc import Iterator

from omegaconf import DictConfig, OmegaConf

from attnexp.errors import ConfigError
from attnexp.rules import Rule
from attnexp.runner.threads import available_cores
from attnexp.runs.flatten import flat_config
from attnexp.schema import declared_items

SEED_KEYS = ("seed", "data.seed", "data.split_seed")  # the run's data and weights follow them
# A value that is another key's, as written: `${decode.beam_size}`.
_REFERENCE = re.compile(r"\$\{([\w.]+)\}")


def declared_values(cfg: DictConfig) -> Iterator[tuple[str, Rule, object, str | None]]:
    """(key, rule, value, the key the value was set at) of each declared key of `cfg`, its value
    resolved. A value taken from another key (`task.beam_size: ${decode.beam_size}`) names that
    key, which is the one to change. One that only Hydra's run can resolve (`${hydra:...}`) is
    left out: the run's own checks judge it."""
    raw = flat_config(OmegaConf.to_container(cfg, resolve=False))
    raw.pop("hydra", None)
    for key, rule, value in declared_items(raw):
        set_as = None
        if isinstance(value, str) and "${" in value:
            reference = _REFERENCE.fullmatch(value)
            set_as = reference[1] if reference else None
            try:
                value = OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
            except Exception:  # an interpolation Hydra resolves only inside its run
                continue
            if OmegaConf.is_config(value):
                value = OmegaConf.to_container(value, resolve=True)
        yield key, rule, value, set_as


def check_declared(cfg: DictConfig) -> None:
    """Every declared key of `cfg` within its declared range (`attnexp.schema.SCHEMA`)."""
    for key, rule, value, set_as in declared_values(cfg):
        rule.check(key, value, set_as)


def check_values(cfg: DictConfig) -> None:
    """Values that no run can use, whatever the machine."""
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
    check_declared(cfg)
    check_val_interval(cfg.trainer)


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
    the epoch that `limit_train_batches` leaves."""
    interval = trainer_cfg.get("val_check_interval")
    limit = trainer_cfg.get("limit_train_batches")
    if type(interval) is int and type(limit) is int and limit < interval:
        raise ConfigError(
            f"trainer.val_check_interval={interval} validates every {interval} training batches, "
            f"but trainer.limit_train_batches={limit} ends each epoch before the first check (set "
            f"trainer.val_check_interval=1.0 to validate once per epoch, or limit_train_batches "
            f">= {interval})"
        )
