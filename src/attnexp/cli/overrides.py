"""The command line before and after Hydra reads it: values it cannot parse unquoted
(`quote_equals_values`), and keys the config does not have (which key was meant).

Hydra refuses `model.hiden_size=8` with "Could not override 'model.hiden_size'. To append to
your config use +model.hiden_size=8": it names the key but not the keys there are, and its
advice, taken for a typo, adds a key nothing reads (`+trainer.max_epoch=3` then fails inside
Lightning). After a command line has failed, `unknown_keys` finds out whether a key was the
reason, with Hydra's own composition as the judge, and for each refused key says the closest
keys and all the keys there are.
"""

import difflib
import re
from collections.abc import Container

from hydra import compose
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, ListConfig, OmegaConf

from attnexp.rules import Renamed
from attnexp.runner.config import package_configs
from attnexp.schema import rule_for


def _sets_a_key(override: Override, groups: Container[str]) -> bool:
    """`model.hidden_size=8`, `seed=1`: a setting; `model=bag_attn`: a group choice. Additions
    (+), deletions (~), package overrides and Hydra's own keys are left to Hydra."""
    key = override.key_or_group
    return (
        override.type is OverrideType.CHANGE
        and override.package is None
        and not override.is_hydra_override()
        and "/" not in key
        and ("." in key or key not in groups)
    )


def _one_value(override: Override) -> str | None:
    """The override with a list sweep (`scorer=dot,additive`, `range(...)`) reduced to its first
    value; None for a sweep with no first value to take (`glob(*)`, `interval(...)`)."""
    if not override.is_sweep_override():
        return override.input_line
    if not (override.is_choice_sweep() or override.is_range_sweep()):
        return None
    key = override.input_line.split("=", 1)[0]
    return f"{key}={next(override.sweep_string_iterator())}"


def _refuses(config_name: str, overrides: list[str]) -> bool:
    """Whether Hydra refuses to compose with these overrides because a key is not there."""
    try:
        compose(config_name, overrides=overrides)
    except ConfigCompositionException as err:
        return str(err).startswith("Could not override")
    return False


def _explain(cfg: DictConfig, override: Override, options: dict[str, list[str]]) -> str | None:
    """Why `cfg` has no place for the override's key, walking it as Hydra does (not through
    interpolations); None where there is nothing better to say than Hydra's message."""
    line, parts = override.input_line, override.key_or_group.split(".")
    renamed = rule_for(override.key_or_group)
    if isinstance(renamed, Renamed):
        return f"{line}: {override.key_or_group} is now called {renamed.to} (set {renamed.to}=...)"
    node: object = cfg
    for depth, part in enumerate(parts):
        parent = ".".join(parts[:depth])
        if isinstance(node, ListConfig):
            return f"{line}: {parent} is a list of {len(node)} (set {parent}=[...])"
        if not isinstance(node, DictConfig):
            if parent in options:  # a group with no option chosen (scheduler: null)
                return (
                    f"{line}: no {parent} is chosen, so it has no keys (choose one first: "
                    f"{parent}={' | '.join(options[parent])})"
                )
            return f"{line}: {parent} is a single setting, with no keys below it (set {parent}=...)"
        if part not in node:
            break
        if OmegaConf.is_interpolation(node, part):  # Hydra sets no keys through one
            target = str(node._get_node(part)._value())  # e.g. "${scorer}"
            points_to = re.fullmatch(r"\$\{([\w.]+)\}", target)
            keyed = points_to and isinstance(OmegaConf.select(cfg, points_to[1]), DictConfig)
            instead = f"set {points_to[1]}.{'.'.join(parts[depth + 1 :])}=..." if keyed else ""
            return (
                f"{line}: {'.'.join(parts[: depth + 1])} is {target}, and Hydra sets no keys "
                f"through an interpolation{f' ({instead} instead)' if instead else ''}"
            )
        node = node[part]
    else:
        return None
    have = sorted(str(k) for k in node if not str(k).startswith("_") and k != "hydra")
    candidates = have + (sorted(options) if not parent else [])  # a misspelt group, at the top
    choice = OmegaConf.select(cfg, f"hydra.runtime.choices.{parent}", default=None)
    where = f"{parent} ({parent}={choice})" if choice else parent or "the config"
    close = [".".join([*parts[:depth], k]) for k in difflib.get_close_matches(part, candidates)]
    alternatives = ", ".join(close[:-1]) + " or " + close[-1] if len(close) > 1 else "".join(close)
    hint = f"; did you mean {alternatives}?" if close else "."
    listing = f" Its keys: {', '.join(have)}." if have else " It has no keys to set."
    return (
        f"{line}: {where} has no key '{part}'{hint}{listing} (To add a new key on purpose, "
        f"write +{line}.)"
    )


def unknown_keys(config_name: str, argv: list[str]) -> list[str]:
    """One message per `key=value` in `argv` that Hydra refuses because `config_name` (composed
    with the overrides before it) has no such key. Empty when Hydra composes the command line
    (the failure came later), when it fails for another reason (Hydra's message says why), and
    for flags other than -m (`--config-name` and the like change what is composed)."""
    if any(arg.startswith("-") and arg not in ("-m", "--multirun") for arg in argv):
        return []
    try:
        overrides = OverridesParser.create().parse_overrides(
            [arg for arg in argv if not arg.startswith("-")]
        )
    except Exception:  # a syntax error: Hydra has said where
        return []
    try:
        with package_configs():
            loader = GlobalHydra.instance().config_loader()
            options = {g: loader.get_group_options(g) for g in loader.list_groups("")}
            lines = [_one_value(o) for o in overrides]
            if None in lines or not _refuses(config_name, lines):
                return []
            # Group choices (and additions, deletions) first, then the settings one at a time,
            # in order, as Hydra applies them: each refused one is explained on what came before.
            pairs = list(zip(overrides, lines, strict=True))
            settings = [(o, line) for o, line in pairs if _sets_a_key(o, options)]
            others = [line for o, line in pairs if not _sets_a_key(o, options)]
            accepted, messages = [], []
            for override, line in settings:
                if not _refuses(config_name, others + accepted + [line]):
                    accepted.append(line)
                    continue
                cfg = compose(config_name, others + accepted, return_hydra_config=True)
                message = _explain(cfg, override, options)
                messages += [message] if message else []
            return messages
    except Exception:  # anything else: Hydra's own message stands alone
        return []


def first_job_config(config_name: str, argv: list[str]) -> DictConfig | None:
    """The config of the command line's (first) job, composed as Hydra will; None where that
    cannot be told here: flags other than -m, a sweep without a first value, a failed compose."""
    if any(arg.startswith("-") and arg not in ("-m", "--multirun") for arg in argv):
        return None
    try:
        overrides = OverridesParser.create().parse_overrides(
            [arg for arg in argv if not arg.startswith("-")]
        )
        lines = [_one_value(o) for o in overrides]
        if None in lines:
            return None
        with package_configs():
            return compose(config_name, overrides=lines)
    except Exception:  # Hydra says what is wrong when it composes the command line itself
        return None


# The keys whose value is a path, which may be a sweep job's dir (`resume=`, evaluate's and
# predict's `ckpt_path=`, `texts_file=`, `out_dir=`, `paths.*`, Hydra's run and sweep dirs).
_PATH_KEY = re.compile(
    r"[+~]{0,2}(resume|ckpt_path|texts_file|out_dir|paths\.\w+|hydra\.(run|sweep)\.dir"
    r"|data\.cache_dir)"
)


def quote_equals_values(args: list[str]) -> list[str]:
    """Each path setting whose value holds `=` quoted whole for Hydra, which never takes such a
    value unquoted ("mismatched input '='"). A sweep job's dir is named like
    `outputs/multiruns/<sweep>/1_scorer=dot,seed=0` (or `0_eval_bag_sizes=[1,3]`), so `resume=`,
    evaluate's and predict's `ckpt_path=` given one read it as the path it is, commas and
    brackets included. A value with quotes, an interpolation or a backslash (Hydra syntax the
    user wrote), one that starts as a list or dict, and every other argument (`overrides=a=1`,
    the value of `-cd <dir>`) are returned as given."""
    quoted = []
    for arg in args:
        key, sep, value = arg.partition("=")
        if (
            sep
            and "=" in value
            and _PATH_KEY.fullmatch(key)
            and not set("'\"$\\") & set(value)
            and not value.startswith(("[", "{"))
        ):
            arg = f"{key}='{value}'"
        quoted.append(arg)
    return quoted
