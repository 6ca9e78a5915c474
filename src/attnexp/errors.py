"""The project's error type for bad user input (configs, data files, CLI arguments)."""

import re
import sys
from typing import NoReturn


class ConfigError(ValueError):
    """A setting or an input that cannot work; the message names the value, the rule and the key."""


def require_positive(key: str, value: int) -> None:
    """Sizes and counts: a zero or negative one would build an empty layer or loop over nothing,
    and fail (if at all) far from the setting that caused it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key}={value} must be a positive integer (set {key}=...)")


def require_non_negative(key: str, value: int) -> None:
    """Counts where 0 means none (worker processes, an optional test set)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{key}={value} must be a whole number >= 0 (set {key}=...)")


def require_fraction(key: str, value: float, *, upto_one: bool = False) -> None:
    """Shares strictly between 0 and 1 (a held-out split that leaves both sides something), or
    with `upto_one` in (0, 1] (a share kept, where 1 keeps everything)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (0 < value < 1 or (upto_one and value == 1))
    ):
        bounds = "0 (exclusive) and 1 (inclusive)" if upto_one else "0 and 1 (exclusive)"
        raise ConfigError(f"{key}={value} must be between {bounds} (set {key}=...)")


def require_probability(key: str, value: float) -> None:
    """Dropout rates: torch refuses one outside [0, 1] only when the layer is built or first run,
    with no key named; 1 would zero every feature."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise ConfigError(
            f"{key}={value} must be a rate from 0 (inclusive) to 1 (exclusive) (set {key}=0.1, ...)"
        )


def require_bool(key: str, value: object) -> None:
    """Switches: a string such as `figures=no` is truthy, so it would switch the thing on."""
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} must be true or false (set {key}=true or {key}=false)")


def require_seed(key: str, seed: object) -> None:
    """A seed torch and numpy both take (null: none given, where the key allows it)."""
    if seed is not None and (type(seed) is not int or not 0 <= seed < 2**32):
        raise ConfigError(
            f"{key}={seed!r} must be a whole number from 0 to 2**32 - 1 (set {key}=0, 1, ..."
            f"{' or null' if key == 'seed' else ''})"
        )


def spawned_refusal(err: BaseException) -> ConfigError | None:
    """A ConfigError raised in a ddp_spawn process (a loss that turned NaN, say) reaches the main
    process as torch's ProcessRaisedException, whose text is that process's traceback: the
    refusal again, to be said as one."""
    from torch.multiprocessing import ProcessRaisedException

    if not isinstance(err, ProcessRaisedException):
        return None
    found = re.search(rf"^{re.escape(ConfigError.__module__)}\.ConfigError: (.+)$", str(err), re.M)
    return ConfigError(found[1]) if found else None


def message_lines(err: BaseException, width: int = 300) -> list[str]:
    """An exception's non-blank lines, each cut to `width` characters: torch's state-dict errors
    run to a line per parameter, which a message quotes a few of."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return [line if len(line) <= width else line[: width - 3] + "..." for line in lines]


def exit_with(err: ConfigError) -> NoReturn:
    """Entry points: end with the message (it says what to change) and exit status 2, without
    the traceback Hydra would print around it."""
    print(f"error: {err}", file=sys.stderr)
    raise SystemExit(2) from None
