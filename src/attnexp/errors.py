"""The project's error type for bad user input (configs, data files, CLI arguments)."""

import sys
from typing import NoReturn


class ConfigError(ValueError):
    """A setting or an input that cannot work; the message names the value, the rule and the key."""


def require_positive(key: str, value: int) -> None:
    """Sizes and counts: a zero or negative one would build an empty layer or loop over nothing,
    and fail (if at all) far from the setting that caused it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key}={value} must be a positive integer (set {key}=...)")


def exit_with(err: ConfigError) -> NoReturn:
    """Entry points: end with the message (it says what to change) and exit status 2, without
    the traceback Hydra would print around it."""
    print(f"error: {err}", file=sys.stderr)
    raise SystemExit(2) from None
