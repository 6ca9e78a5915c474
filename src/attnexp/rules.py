"""What a setting may hold: the rules `attnexp.schema` declares its keys with (a number in a range,
one of several rules, a word, a switch, a text, a list, a renamed key), and the rules used most.

A rule names the key it is given, its range and what to set. Standard library only: the
framework-free constructors can check their own arguments with the same rules
(`rule.check("hidden_size", hidden_size)`).
"""

import math
from dataclasses import dataclass

from attnexp.errors import ConfigError


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return (_is_int(value) or isinstance(value, float)) and not (
        isinstance(value, float) and math.isnan(value)
    )


@dataclass(frozen=True)
class Rule:
    """What a setting may hold. Subclasses say `admits` and `describe`; `nullable`: null too
    (the note says what null means); `fixed_by_run`: saved with a finished run (see the module)."""

    nullable: bool = False
    null_means: str = ""
    fixed_by_run: bool = False

    def admits(self, value: object) -> bool:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def accepts(self, value: object) -> bool:
        return (value is None and self.nullable) or (value is not None and self.admits(value))

    def check(self, key: str, value: object, set_as: str | None = None) -> None:
        """Raises ConfigError naming `key` (or `set_as`, the key the value came from through an
        interpolation) unless the rule accepts `value`."""
        if self.accepts(value):
            return
        named = set_as or key
        where = f" ({key} takes it from {named})" if set_as and set_as != key else ""
        null = f"; null: {self.null_means}" if self.nullable and self.null_means else ""
        raise ConfigError(
            f"{named}={value!r} must be {self.describe()}{null}{where} (set {named}=...)"
        )


@dataclass(frozen=True)
class Number(Rule):
    """An int (`whole=True`) or any real number in [low, high]; `open_low` / `open_high` leave an
    end out; `special` values are accepted besides the range (each with its meaning)."""

    whole: bool = True
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    special: tuple[tuple[object, str], ...] = ()

    def admits(self, value: object) -> bool:
        if any(value == v and type(value) is type(v) for v, _ in self.special):
            return True
        if not (_is_int(value) if self.whole else _is_number(value)):
            return False
        if self.low is not None and (value < self.low or (self.open_low and value == self.low)):
            return False
        return self.high is None or not (
            value > self.high or (self.open_high and value == self.high)
        )

    def describe(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        low, high = _shown(self.low), _shown(self.high)
        if self.low is not None and self.high is not None and not (self.open_low or self.open_high):
            text = f"{kind} from {low} to {high}"
        else:
            ends = []
            if self.low is not None:
                ends.append(f"{'>' if self.open_low else '>='} {low}")
            if self.high is not None:
                ends.append(f"{'<' if self.open_high else '<='} {high}")
            text = f"{kind} {' and '.join(ends)}".rstrip()
        extra = [f"{v!r}: {meaning}" for v, meaning in self.special]
        return f"{text} ({'; '.join(extra)})" if extra else text


def _shown(bound: float | None) -> str:
    return str(int(bound)) if isinstance(bound, int | float) and bound == int(bound) else str(bound)


@dataclass(frozen=True)
class Either(Rule):
    """One of several rules (a count of batches or a fraction of them)."""

    options: tuple[Rule, ...] = ()

    def admits(self, value: object) -> bool:
        return any(option.admits(value) for option in self.options)

    def describe(self) -> str:
        return " or ".join(option.describe() for option in self.options)


@dataclass(frozen=True)
class Word(Rule):
    """One of a few strings."""

    choices: tuple[str, ...] = ()

    def admits(self, value: object) -> bool:
        return isinstance(value, str) and value in self.choices

    def describe(self) -> str:
        return " or ".join(repr(choice) for choice in self.choices)


@dataclass(frozen=True)
class Switch(Rule):
    """true or false (a string such as `no` is truthy, so it would switch the thing on)."""

    def admits(self, value: object) -> bool:
        return isinstance(value, bool)

    def describe(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class Text(Rule):
    """Any string (a tokenizer kind or a path the data module reads and judges)."""

    def admits(self, value: object) -> bool:
        return isinstance(value, str)

    def describe(self) -> str:
        return "a string"


@dataclass(frozen=True)
class ListOf(Rule):
    """A non-empty list whose items each fit `item`; `length`: each item is itself a list of
    that many (a pair: [source, reference])."""

    item: Rule | None = None
    length: int | None = None

    def _fits(self, entry: object) -> bool:
        if self.length is None:
            return self.item.admits(entry)
        return (
            isinstance(entry, list | tuple)
            and len(entry) == self.length
            and all(self.item.admits(part) for part in entry)
        )

    def admits(self, value: object) -> bool:
        return (
            isinstance(value, list | tuple)
            and len(value) > 0
            and all(self._fits(entry) for entry in value)
        )

    def describe(self) -> str:
        if self.length is None:
            return f"a non-empty list, each item {self.item.describe()}"
        return (
            f"a non-empty list of [{', '.join(['...'] * self.length)}], each {self.item.describe()}"
        )


@dataclass(frozen=True)
class Renamed(Rule):
    """A key that is now called `to` (a full key): refused with the new name, whatever its value."""

    to: str = ""

    def admits(self, value: object) -> bool:
        return False

    def check(self, key: str, value: object, set_as: str | None = None) -> None:
        raise ConfigError(f"{key} is now called {self.to} (set {self.to}={value!r} instead)")


# The rules the table below uses most.
POSITIVE = Number(low=1)  # sizes and counts: 0 would build an empty layer or loop over nothing
COUNT = Number(low=0)  # counts where 0 means none
RATE = Number(whole=False, low=0, high=1, open_high=True)  # dropout: 1 would zero every feature
PROBABILITY = Number(whole=False, low=0, high=1)
FRACTION = Number(whole=False, low=0, high=1, open_low=True, open_high=True)  # both sides get some
SHARE = Number(whole=False, low=0, high=1, open_low=True)  # a share kept: 1 keeps everything
NON_NEGATIVE = Number(whole=False, low=0)
POSITIVE_REAL = Number(whole=False, low=0, open_low=True)
SEED = Number(low=0, high=2**32 - 1)
BATCHES = Either(options=(Number(low=0), Number(whole=False, low=0, high=1)))  # a count or a share
TOKENIZER = Text(fixed_by_run=True)


def nullable(rule: Rule, means: str) -> Rule:
    return type(rule)(**{**rule.__dict__, "nullable": True, "null_means": means})


def fixed(rule: Rule) -> Rule:
    return type(rule)(**{**rule.__dict__, "fixed_by_run": True})
