"""Turn a composed config into DataModule, model and task, checking that the parts fit together."""

import inspect
import logging
from pathlib import Path

from hydra.errors import InstantiationException
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


def instantiate_checked(node: DictConfig, **kwargs):
    """hydra's instantiate, but a ConfigError raised by the constructor reaches the user as is
    (not wrapped in an InstantiationException that buries the message)."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        if isinstance(err.__cause__, ConfigError):
            raise err.__cause__ from None
        raise


def check_data_dir(data_dir: str, overrides: list[str]) -> None:
    """A data dir given on the command line must exist; the default one may be missing (the
    DataModules then fall back to the hub or the embedded sample, with a WARNING)."""
    given = any(o.lstrip("+~").split("=", 1)[0] == "paths.data_dir" for o in overrides)
    if given and not Path(data_dir).expanduser().is_dir():
        raise ConfigError(
            f"paths.data_dir={data_dir} does not exist (give a folder holding mnist/, imdb/, "
            f"lcqmc/, or drop paths.data_dir= to use the default data/ or the embedded samples)"
        )


def build_model(model_cfg: DictConfig, datamodule: AttnDataModule):
    """Instantiate the model with the runtime sizes it asks for (num_classes, vocab_size, ...)."""
    target = get_class(model_cfg._target_)
    accepted = inspect.signature(target).parameters
    runtime = {k: v for k, v in datamodule.model_kwargs.items() if k in accepted}
    log.info("model %s runtime sizes: %s", target.__name__, runtime)
    return instantiate_checked(model_cfg, **runtime)


def build(cfg: DictConfig, choices: dict[str, str | None], artifacts_dir: str | None = None):
    """Returns (datamodule, task); the DataModule is set up for fit.

    artifacts_dir: a finished run's dir whose saved artifacts (e.g. its tokenizer) the DataModule
        reuses instead of rebuilding them (evaluate, predict).
    """
    check_config(cfg, choices)
    datamodule: AttnDataModule = instantiate_checked(cfg.data)
    if artifacts_dir is not None:
        datamodule.load_artifacts(str(artifacts_dir))
    datamodule.prepare_data()
    datamodule.setup("fit")
    model = build_model(cfg.model, datamodule)
    datamodule.adapt_to(model)
    task = instantiate(
        cfg.task,
        model=model,
        num_classes=datamodule.num_classes,
        test_set_names=datamodule.test_set_names,
    )
    return datamodule, task
