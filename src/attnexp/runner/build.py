"""Turn a composed config into DataModule, model and task, checking that the parts fit together."""

import inspect
import logging
import re
from collections.abc import Callable, Collection
from importlib import resources
from pathlib import Path

import yaml
from hydra.errors import InstantiationException
from hydra.utils import get_class, get_object, instantiate
from omegaconf import DictConfig

from attnexp.data.base import AttnDataModule
from attnexp.errors import ConfigError
from attnexp.rules import Renamed
from attnexp.runs.overrides import override_key
from attnexp.schema import rule_for
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
    """hydra's instantiate, with the constructor's refusal said in the config's words: a
    ConfigError as is, a ValueError that names the constructor's arguments (`num_heads=3 must
    ...`) with their config keys and the keys to set (`model.num_heads=3 must ... (set
    model.num_heads=...)`), a key the class does not take with the ones it does take. Hydra's
    InstantiationException would bury each of them in its own message."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, ConfigError):
            raise cause from None
        refusal = keyed_refusal(cause, node, kwargs) or unexpected_argument(cause, node)
        if refusal is not None:
            raise refusal from None
        raise


def _section(node: DictConfig) -> str:
    """The config key of `node` (`model`, `scorer`)."""
    return full_key(node) or "<section>"


# An argument named in a constructor's message: `num_heads=3` (not `model.num_heads=3`).
_ARGUMENT = re.compile(r"(?<![\w.])(\w+)(?==)")


def keyed_refusal(
    cause: BaseException | None, node: DictConfig, runtime: Collection[str] = ()
) -> ConfigError | None:
    """A constructor's ValueError whose message names its arguments as `name=value`, with each
    argument that is a key of `node` (or of a config inside it, as `model.scorer` is the
    `scorer` group), or one it may take (its signature's, less the `runtime` sizes passed), written
    as its config key, and those keys as the fix. None when it names none of them: then it is
    no setting's fault, and Hydra's traceback stands."""
    if not isinstance(cause, ValueError) or isinstance(cause, ConfigError):
        return None
    try:
        parameters = inspect.signature(get_object(node.get("_target_"))).parameters
    except (ImportError, ValueError, TypeError):
        parameters = {}
    keys = {p: f"{_section(node)}.{p}" for p in parameters if p not in runtime}
    for value in [*node.values(), node]:  # the node's own keys last: they win a shared name
        if isinstance(value, DictConfig):
            keys |= {str(k): f"{_section(value)}.{k}" for k in value if not str(k).startswith("_")}
    named = [keys[name] for name in dict.fromkeys(_ARGUMENT.findall(str(cause))) if name in keys]
    if not named:
        return None
    message = _ARGUMENT.sub(lambda m: keys.get(m[1], m[1]), str(cause))
    return ConfigError(f"{message} (set {' or '.join(f'{key}=...' for key in named)})")


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
    section = _section(node)
    renamed = rule_for(f"{section}.{name}")
    if isinstance(renamed, Renamed):  # a run saved with the old name, or +model.heads=
        return ConfigError(
            f"{section}.{name} is now called {renamed.to} (write {renamed.to} for "
            f"{section}.{name}, in a run's saved .hydra/config.yaml too)"
        )
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
