"""Keys on a command line that the composed config does not have: which key was meant.

Hydra refuses `model.hiden_size=8` with "Could not override 'model.hiden_size'. To append to
your config use +model.hiden_size=8": it names the key but not the keys there are, and its
advice, taken for a typo, adds a key nothing reads (`+trainer.max_epoch=3` then fails inside
Lightning). After Hydra has refused a command line, `unknown_keys` composes it again without its
key settings and says, for each key the config lacks, the closest keys and all the keys its
parent has.
"""

import difflib

from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from omegaconf import DictConfig, OmegaConf


def _sets_a_key(override: Override, groups: set[str]) -> bool:
    """`model.hidden_size=8`, `seed=1`: a setting; `model=bag_attn`, `experiment/bag=dot`: a group
    choice. Additions (+), deletions (~), package overrides and Hydra's own keys are left alone."""
    key = override.key_or_group
    return (
        override.type is OverrideType.CHANGE
        and override.package is None
        and not override.is_hydra_override()
        and "/" not in key
        and ("." in key or key not in groups)
    )


def _first_value(override: Override) -> str:
    """The override with a sweep (`scorer=dot,additive`) reduced to its first value."""
    if not override.is_sweep_override():
        return override.input_line
    key = override.input_line.split("=", 1)[0]
    return f"{key}={next(override.sweep_string_iterator())}"


def _message(cfg: DictConfig, override: Override) -> str | None:
    """None if `cfg` has the override's key; else which part is missing and what is there."""
    parts = override.key_or_group.split(".")
    node: object = cfg
    for depth, part in enumerate(parts):
        parent = ".".join(parts[:depth])
        if not isinstance(node, DictConfig):
            return (
                f"{override.input_line}: {parent} is a single setting, with no keys below it "
                f"(set {parent}=...)"
            )
        if part not in node:
            break
        try:  # an interpolation (`model.scorer: ${scorer}`) leads to what it points to
            node = node[part]
        except Exception:  # one only a run resolves (hydra:, a run dir): cannot tell
            return None
    else:
        return None
    have = sorted(str(k) for k in node if not str(k).startswith("_") and k != "hydra")
    choice = OmegaConf.select(cfg, f"hydra.runtime.choices.{parent}", default=None)
    where = f"{parent} ({parent}={choice})" if choice else parent or "the config"
    close = [".".join([*parts[:depth], k]) for k in difflib.get_close_matches(part, have)]
    hint = f"; did you mean {' or '.join(close)}?" if close else "."
    return (
        f"{override.input_line}: {where} has no key '{part}'{hint} Its keys: "
        f"{', '.join(have)}. (To add a new key on purpose, write +{override.input_line}.)"
    )


def unknown_keys(config_name: str, argv: list[str]) -> list[str]:
    """One message per `key=value` in `argv` whose key `config_name` composed with the other
    overrides lacks. Empty when all keys exist, or when the command line fails for another
    reason (Hydra's own message then says why), or when a flag other than -m changes what
    Hydra composes (`--config-name`, `--config-dir`)."""
    if any(arg.startswith("-") and arg not in ("-m", "--multirun") for arg in argv):
        return []
    try:
        overrides = OverridesParser.create().parse_overrides(
            [arg for arg in argv if not arg.startswith("-")]
        )
    except Exception:  # Hydra has reported the syntax error
        return []
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module("attnexp.conf", version_base="1.3"):
            groups = set(GlobalHydra.instance().config_loader().list_groups(""))
            settings = [o for o in overrides if _sets_a_key(o, groups)]
            others = [_first_value(o) for o in overrides if not _sets_a_key(o, groups)]
            try:
                cfg = compose(config_name, overrides=others, return_hydra_config=True)
            except Exception:  # a bad group choice or the like: not what this looks for
                return []
    finally:
        GlobalHydra.instance().clear()
    return [m for m in (_message(cfg, o) for o in settings) if m is not None]
