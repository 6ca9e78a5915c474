"""predict.yaml's own settings (and explain's device=), checked before anything is loaded."""

import torch
from omegaconf import DictConfig, OmegaConf

from attnexp.errors import ConfigError
from attnexp.rules import Rule
from attnexp.runner.load import given_ckpt_path
from attnexp.schema import PREDICT

PREDICT_DEVICES = ("cpu", "cuda")


def check_command_settings(cfg: DictConfig, declared: dict[str, Rule], command: str) -> None:
    """A command's own settings (predict.yaml, explain.yaml: `declared` in attnexp.schema), before
    anything is loaded."""
    given_ckpt_path(cfg)
    for key, rule in declared.items():
        rule.check(key, OmegaConf.select(cfg, key))
    check_device(cfg.device, command)


def check_predict_settings(cfg: DictConfig) -> None:
    check_command_settings(cfg, PREDICT, "predict")


def check_device(name: str, command: str) -> None:
    """`device=` of predict or explain: a CPU or a CUDA device this machine has."""
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ConfigError(
            f"device={name} is not a torch device ({err}); set device=cpu or device=cuda"
        ) from None
    if device.type not in PREDICT_DEVICES:
        # torch also knows mps, xpu, meta, ...: on those predict fails later, with a traceback
        raise ConfigError(
            f"device={name}: {command} runs on {' or '.join(PREDICT_DEVICES)} (set device=cpu, "
            f"device=cuda or device=cuda:<index>)"
        )
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ConfigError(
            f"device={name}: torch {torch.__version__} sees "
            f"{torch.cuda.device_count()} CUDA device(s) on this machine; set device=cpu"
        )
