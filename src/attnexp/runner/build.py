"""Turn a composed config into DataModule, model and task, checking that the parts fit together."""

import inspect
import logging
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import yaml
from hydra.errors import InstantiationException
from hydra.utils import get_class, get_object, instantiate
from omegaconf import DictConfig

from attnexp.data.base import AttnDataModule
from attnexp.errors import ConfigError
from attnexp.runs.dirs import override_key
from attnexp.tasks.privates import full_key

log = logging.getLogger(__name__)


def config_options(group: str) -> dict[str, dict]:
    """The options of a conf/ group, {name: its yaml as written}: the lists error messages
    offer, found the way Hydra finds them, so a new yaml joins them without a list to edit."""
    group_dir = resources.files("attnexp.conf") / group
    return {
        path.name.removesuffix(".yaml"): yaml.safe_load(path.read_text()) or {}
        for path in sorted(group_dir.iterdir(), key=lambda p: p.name)
        if path.name.endswith(".yaml")
    }


def scorer_models() -> list[str]:
    """The model options whose yaml takes a scorer: the ones `scorer=` applies to."""
    return [name for name, node in config_options("model").items() if "scorer" in node]


def data_subdirs() -> list[str]:
    """The folders under paths.data_dir that the data options read (mnist, imdb, ...)."""
    subdirs = (get_class(node["_target_"]).data_subdir for node in config_options("data").values())
    return sorted({s for s in subdirs if s})


def given(key: str, overrides: list[str]) -> bool:
    """Whether the command line set `key` (as key=..., +key=... or ~key)."""
    return any(override_key(o) == key for o in overrides)


def check_config(
    cfg: DictConfig, choices: dict[str, str | None], overrides: list[str] = ()
) -> None:
    """The model/data/scorer combination makes sense; errors name the keys to change.

    A scorer that the model's attention mode does not use (bag_attn's `simple` attention) is
    dropped from `cfg` and `choices`, so the run's record and hparams do not claim it.
    """
    model_name, data_name = choices.get("model"), choices.get("data")
    if cfg.get("scorer") is not None and "scorer" not in cfg.model:
        raise ConfigError(
            f"model={model_name} has no attention scorer, so scorer={choices.get('scorer')} has no "
            f"effect (drop scorer=, or pick a model with one: {', '.join(scorer_models())})"
        )
    model_cls = get_class(cfg.model._target_)
    attention = cfg.model.get("attention")
    scorer_free = attention in getattr(model_cls, "scorer_free_attentions", ())
    if "scorer" in cfg.model and cfg.model.get("scorer") is None and not scorer_free:
        raise ConfigError(
            f"model={model_name} needs an attention scorer (set scorer=..., one of "
            f"{', '.join(config_options('scorer'))})"
        )
    if cfg.get("scorer") is not None and scorer_free:
        if given("scorer", list(overrides)):
            raise ConfigError(
                f"model.attention={attention} scores each item on its own, so "
                f"scorer={choices.get('scorer')} has no effect (drop scorer=, or set "
                f"model.attention=context)"
            )
        cfg.scorer = None
        choices["scorer"] = None
    model_kind = getattr(model_cls, "input_kind", None)
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
        unexpected = unexpected_argument(err.__cause__, node)
        if unexpected is not None:
            raise unexpected from None
        raise


def unexpected_argument(cause: BaseException | None, node: DictConfig) -> ConfigError | None:
    """A key added with `+` that the class does not take, said with the arguments it does take:
    found by comparing the node's keys with the target's signature (not Python's message)."""
    if not isinstance(cause, TypeError):
        return None
    target = node.get("_target_")
    try:
        parameters = inspect.signature(get_object(target)).parameters
    except (ImportError, ValueError, TypeError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return None  # it takes any keyword
    unknown = [key for key in node if not str(key).startswith("_") and key not in parameters]
    if not unknown:
        return None
    name = unknown[0]
    section = full_key(node) or "<section>"
    takes = ", ".join(p for p in parameters if p != "self")
    return ConfigError(
        f"{section}.{name}: {target} takes no argument '{name}' (it takes: {takes}); a key added "
        f"with + is passed to it, so it must be one of these (drop +{section}.{name}=...)"
    )


def check_data_dir(data_dir: str, overrides: list[str]) -> None:
    """A data dir given on the command line must exist; the default one may be missing (the
    DataModules then fall back to the hub or the embedded sample, with a WARNING)."""
    path = Path(data_dir).expanduser()
    if given("paths.data_dir", overrides) and not path.is_dir():
        what = "is a file, not a folder" if path.exists() else "does not exist"
        raise ConfigError(
            f"paths.data_dir={data_dir} {what} (give a folder holding "
            f"{', '.join(f'{s}/' for s in data_subdirs())}, or drop paths.data_dir= to use the "
            f"default data/ or the embedded samples)"
        )


def resolved_data_dir(data_dir: str) -> str:
    """The data dir as a run's record holds it: absolute, `~` expanded."""
    return str(Path(data_dir).expanduser().resolve())


def build_model(model_cfg: DictConfig, datamodule: AttnDataModule):
    """Instantiate the model with the runtime sizes it asks for (num_classes, vocab_size, ...)."""
    target = get_class(model_cfg._target_)
    accepted = inspect.signature(target).parameters
    runtime = {k: v for k, v in datamodule.model_kwargs.items() if k in accepted}
    log.info("model %s runtime sizes: %s", target.__name__, runtime)
    return instantiate_checked(model_cfg, **runtime)


def build(
    cfg: DictConfig,
    choices: dict[str, str | None],
    artifacts_dir: str | None = None,
    overrides: list[str] = (),
    before_setup: Callable[[AttnDataModule], None] | None = None,
):
    """Returns (datamodule, task); the DataModule is set up for fit.

    artifacts_dir: a finished run's dir whose saved artifacts (e.g. its tokenizer) the DataModule
        reuses instead of rebuilding them (evaluate, predict).
    overrides: the command line's, to tell options the user set from the models' defaults.
    before_setup: called with the DataModule before it loads anything (a check that should fail
        fast, before tokenizing a dataset).
    """
    check_config(cfg, choices, overrides)
    datamodule: AttnDataModule = instantiate_checked(cfg.data)
    if before_setup is not None:
        before_setup(datamodule)
    if artifacts_dir is not None:
        datamodule.load_artifacts(str(artifacts_dir))
    datamodule.prepare_data()
    datamodule.setup("fit")
    model = build_model(cfg.model, datamodule)
    datamodule.adapt_to(model)
    task = instantiate_checked(
        cfg.task,
        model=model,
        num_classes=datamodule.num_classes,
        test_set_names=datamodule.test_set_names,
    )
    return datamodule, task
