"""Turn a composed config into DataModule, model and task, checking that the parts fit together."""

import inspect
import logging

from hydra.utils import get_class, instantiate
from omegaconf import DictConfig

from attnexp.data.base import AttnDataModule
from attnexp.errors import ConfigError

log = logging.getLogger(__name__)


def check_config(cfg: DictConfig, choices: dict[str, str | None]) -> None:
    """The model/data/scorer combination makes sense; errors name the keys to change."""
    model_name, data_name = choices.get("model"), choices.get("data")
    if cfg.get("scorer") is not None and "scorer" not in cfg.model:
        raise ConfigError(
            f"model={model_name} has no attention scorer, so scorer={choices.get('scorer')} has no "
            f"effect (drop scorer=, or pick a model with one: bag_attn, lstm_attn)"
        )
    model_kind = getattr(get_class(cfg.model._target_), "input_kind", None)
    data_kind = getattr(get_class(cfg.data._target_), "input_kind", None)
    if model_kind != data_kind:
        raise ConfigError(
            f"model={model_name} reads '{model_kind}' batches but data={data_name} provides "
            f"'{data_kind}' (drop data= to use the model's own dataset)"
        )


def build_model(model_cfg: DictConfig, datamodule: AttnDataModule):
    """Instantiate the model with the runtime sizes it asks for (num_classes, vocab_size, ...)."""
    target = get_class(model_cfg._target_)
    accepted = inspect.signature(target).parameters
    runtime = {k: v for k, v in datamodule.model_kwargs.items() if k in accepted}
    log.info("model %s runtime sizes: %s", target.__name__, runtime)
    return instantiate(model_cfg, **runtime)


def build(cfg: DictConfig, choices: dict[str, str | None]):
    """Returns (datamodule, task); the DataModule is set up for fit."""
    check_config(cfg, choices)
    datamodule: AttnDataModule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    model = build_model(cfg.model, datamodule)
    datamodule.adapt_to(model)
    task = instantiate(
        cfg.task, model=model, num_classes=datamodule.num_classes, test_set_names=datamodule.test_set_names
    )
    return datamodule, task
