"""Building a class from a config node as the runner does (`instantiate_checked`), to test the
refusal a user sees: the constructor's own words, with the config keys and the fix."""

import pytest
from omegaconf import OmegaConf

from attnexp.errors import ConfigError
from attnexp.runner.build import instantiate_checked


def node(cls: type, section: str = "model", **keys):
    """The config node `<section>: {_target_: cls, **keys}`, as Hydra composes it."""
    target = f"{cls.__module__}.{cls.__qualname__}"
    return OmegaConf.create({section: {"_target_": target, **keys}})[section]


def refusal(cls: type, section: str = "model", runtime: dict | None = None, **keys) -> str:
    """The ConfigError message of building `cls` from `section` with `keys` (and the sizes the
    DataModule passes, `runtime`)."""
    with pytest.raises(ConfigError) as caught:
        instantiate_checked(node(cls, section, **keys), **(runtime or {}))
    return str(caught.value)
