"""The config of `python -m attnexp.evaluate|predict`: `<command>.yaml` composed with the command
line, checked before hydra.main or the runner sees it. A run setting given as `data.x=...` is said
with where it goes (`overrides=["data.x=..."]`), not with Hydra's advice (`+data.x=...`)."""

import re
import sys

from hydra import compose
from omegaconf import DictConfig, OmegaConf

from attnexp.errors import ConfigError
from attnexp.runner.config import package_configs
from attnexp.runs.overrides import override_key
from attnexp.schema import fixed_by_run


def not_a_setting(command: str, override: str) -> ConfigError:
    """A key that `<command>.yaml` lacks (the composed config of the command, not of the run)."""
    base = compose(command)
    own = [f"{k}.*" if OmegaConf.is_dict(OmegaConf.select(base, k)) else k for k in base]
    key = override_key(override)
    if key.startswith("trainer.") and "trainer" in base:  # the run's trainer.* never test
        mine = ", ".join(f"trainer.{k}" for k in base.trainer)
        hint = f"; {command} tests with its own trainer settings ({mine}), not the run's"
    elif key.startswith("trainer."):
        hint = f"; {command} runs no Trainer (it runs the model on device=...)"
    elif "." in key:
        hint = f"; a setting of the run goes inside overrides: 'overrides=[\"{override.lstrip('+')}\"]'"
    else:  # a group choice (model=...) is the run's own and cannot change
        hint = ""
    return ConfigError(
        f"{command}: {override} is not a setting of {command} (its own: {', '.join(own)}){hint}"
    )


def compose_command_cfg(command: str, overrides: list[str]) -> DictConfig:
    """`<command>.yaml` (evaluate, predict) composed with the command line's overrides. Hydra's
    advice for a run setting given as `data.x=...` (`+data.x=...`, which adds a key the command
    ignores) is replaced by where it goes: `overrides=["data.x=..."]`."""
    with package_configs():
        for override in overrides:
            key, _, value = override.partition("=")
            if override_key(override) == "overrides" and not value.lstrip().startswith("["):
                raise ConfigError(
                    f"{command}: {override}: overrides takes a list, write "
                    f"'overrides=[\"{value}\"]' (one quoted key=value per setting)"
                )
            if key.startswith("+") and not key.startswith("+hydra"):
                raise not_a_setting(command, override)
        try:
            cfg = compose(command, overrides=overrides)
        except Exception as err:  # Hydra's override/config errors
            key = re.match(r"Could not override '([^']+)'", str(err))
            bad = [o for o in overrides if key and override_key(o) == key.group(1)]
            if bad:
                raise not_a_setting(command, bad[0]) from None
            unquoted = [o for o in overrides if override_key(o) == "overrides" and '"' not in o]
            hint = (  # Hydra's parser reads [a=1] as a broken list: "no viable alternative"
                f" ({unquoted[0]}: quote each setting, 'overrides=[\"key=value\", ...]')"
                if unquoted and "=" in unquoted[0].partition("=")[2]
                else ""
            )
            raise ConfigError(f"{command}: {str(err).splitlines()[0]}{hint}") from None
    check_run_overrides(command, [str(o) for o in cfg.get("overrides") or []])
    return cfg


def check_run_overrides(command: str, overrides: list[str]) -> None:
    """A finished run reads text with the tokenizer it saved: `overrides=[...]` of a key that
    tokenizer was built from (`fixed_by_run` in attnexp.schema: the vocabulary, lowercasing, the
    languages) would be accepted and change nothing."""
    fixed = [o for o in overrides if fixed_by_run(override_key(o))]
    if fixed:
        keys = ", ".join(override_key(o) for o in fixed)
        raise ConfigError(
            f"{command}: overrides={fixed} cannot take effect: the run reads text with the "
            f"tokenizer it saved, which fixes {keys} (drop them; to test other tokenizer "
            f"settings, train a run with them)"
        )


def answer_without_running(command: str, doc: str | None, argv: list[str]) -> int | None:
    """What a key=value command (predict, explain) answers before it composes anything: its
    --help (exit 0: its docstring and its settings, as `<command>.yaml` lists them), or the
    refusal of one of Hydra's flags (exit 2: --cfg, -m, ... are not its; Hydra's lexer error said
    nothing). None for a command line of key=value arguments."""
    if any(arg in ("-h", "--help") for arg in argv):
        from importlib.resources import files

        settings = files("attnexp.conf").joinpath(f"{command}.yaml").read_text(encoding="utf-8")
        print(f"{(doc or '').strip()}\n\nSettings (key=value; conf/{command}.yaml):\n\n{settings}")
        return 0
    flags = [arg for arg in argv if arg.startswith("-")]
    if flags:
        print(
            f"error: {command} takes key=value arguments only, not {flags[0]} (see python -m "
            f"attnexp.{command} --help)",
            file=sys.stderr,
        )
        return 2
    return None
