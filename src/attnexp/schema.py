"""The declared ranges of the settings in conf/: one table per config group (`SCHEMA`), the one
place where what a key may hold is written down.

The command line checks every declared key of a composed config before torch loads
(`attnexp.runner.settings.check_declared`), so a key gets its check by being declared here, and
`tests/test_schema.py` walks every numeric key of every option in conf/ to find one that is not.
A rule names the key it is given, its range and what to set; a key may also be marked
`fixed_by_run`: the run saves what it builds from it (its tokenizer), so evaluating a finished run
with another value changes nothing and is refused.

Standard library only: the framework-free constructors can check their own arguments with the
same rules (`rule.check("hidden_size", hidden_size)`).
"""

import math
import re
from collections.abc import Iterator, Mapping
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


# Per config group: its keys (relative to the group's package; `*` stands for any one name, as
# the callbacks' own names) and their rules. "" is the top level of the config.
SCHEMA: dict[str, dict[str, Rule]] = {
    "": {
        "seed": nullable(SEED, "draw one and record it"),
        "test": Switch(),
    },
    "data": {
        "seed": nullable(SEED, "none"),
        "split_seed": nullable(SEED, "the run's seed"),
        "batch_size": POSITIVE,
        "eval_batch_size": POSITIVE,
        "num_workers": COUNT,
        "pool_batches": POSITIVE,
        "bag_size": POSITIVE,
        "label_rule": Word(choices=("largest", "parity")),
        "min_bag_size": POSITIVE,
        "eval_bag_sizes": ListOf(item=POSITIVE),
        "eval_variable_max": COUNT,  # 0: no variable-size test set
        "num_train_bags": nullable(POSITIVE, "one bag per training image"),
        "num_eval_bags": nullable(POSITIVE, "pool size // mean bag size"),
        "shift": COUNT,
        "on_device": Either(options=(Word(choices=("auto",)), Switch())),
        "val_fraction": FRACTION,
        "train_fraction": SHARE,
        "val_block": POSITIVE,
        "val_split": Word(choices=("random", "blocks")),
        "val_from": Word(choices=("train", "test")),
        "train_split": Word(choices=("train", "dev")),
        "max_seq_len": POSITIVE,
        "max_tokens": nullable(POSITIVE, "keep every pair"),
        "val_sources": POSITIVE,
        "test_sources": POSITIVE,
        "train_head": nullable(POSITIVE, "train on every source not held out"),
        "val_bleu_sources": COUNT,
        "vocab_size": fixed(POSITIVE),
        "min_frequency": fixed(POSITIVE),
        "lowercase": fixed(Switch()),
        "tokenizer": TOKENIZER,
        "word_split": TOKENIZER,
        "truncation": Word(choices=("head", "head_tail")),
        "vocab_file": nullable(TOKENIZER, "build the vocabulary from the training split"),
        "tokenizer_path": nullable(TOKENIZER, "train a tokenizer"),
        "src": TOKENIZER,
        "tgt": TOKENIZER,
    },
    "model": {
        "hidden_size": POSITIVE,
        "embed_dim": POSITIVE,
        "num_layers": POSITIVE,
        "num_heads": POSITIVE,
        "ffn_size": POSITIVE,
        "heads": Renamed(to="model.num_heads"),
        "depth": Renamed(to="model.num_layers"),
        "max_seq_len": POSITIVE,
        "dropout": RATE,
        "embed_dropout": RATE,
        "attn_dropout": RATE,
        "attention_dropout": RATE,
        "teacher_forcing": PROBABILITY,
    },
    "scorer": {"attn_dim": nullable(POSITIVE, "the key size")},
    "optimizer": {"lr": POSITIVE_REAL, "momentum": Number(whole=False, low=0, high=1)},
    "scheduler": {"warmup_ratio": Number(whole=False, low=0, high=1, open_high=True)},
    "task": {
        "weight_decay": NON_NEGATIVE,
        "label_smoothing": Number(whole=False, low=0, high=1, open_high=True),
        "beam_size": POSITIVE,
        "max_len": POSITIVE,
        "alpha": NON_NEGATIVE,  # the length penalty's exponent; 0: none
        "probe_pairs": nullable(ListOf(item=Text(), length=2), "none"),
    },
    "decode": {"beam_size": POSITIVE, "max_len": POSITIVE, "alpha": NON_NEGATIVE},
    "trainer": {
        "max_epochs": nullable(Number(low=1, special=((-1, "no limit"),)), "Lightning's 1000"),
        "min_epochs": nullable(COUNT, "none"),
        "max_steps": Number(low=1, special=((-1, "no limit"),)),
        "devices": Either(options=(POSITIVE, Number(low=-1, high=-1), Word(choices=("auto",)))),
        "num_nodes": POSITIVE,
        "limit_train_batches": nullable(BATCHES, "every batch"),
        "limit_val_batches": nullable(BATCHES, "every batch"),
        "limit_test_batches": nullable(BATCHES, "every batch"),
        "overfit_batches": BATCHES,
        "check_val_every_n_epoch": nullable(POSITIVE, "validate by trainer.val_check_interval"),
        "val_check_interval": nullable(
            Either(options=(POSITIVE, Number(whole=False, low=0, high=1, open_low=True))),
            "once per epoch",
        ),
        "log_every_n_steps": POSITIVE,
        "gradient_clip_val": nullable(NON_NEGATIVE, "no clipping"),
        "threads": Either(options=(POSITIVE, Word(choices=("auto",)))),
    },
    "callbacks": {
        "*.save_top_k": Number(low=-1),  # -1: every checkpoint, 0: none
        "*.patience": COUNT,
        "*.min_delta": NON_NEGATIVE,
        "*.num_examples": POSITIVE,
        "*.every_n_epochs": POSITIVE,
    },
}


# The explain command's own settings (conf/explain.yaml), checked before it loads a run. Not in
# SCHEMA: no run's config holds them.
EXPLAIN: dict[str, Rule] = {
    "explain.n_examples": POSITIVE,
    "explain.seed": SEED,
    "explain.batch_size": POSITIVE,
    "explain.ig_steps": POSITIVE,
    "explain.top_k": POSITIVE,
    "explain.permutations": POSITIVE,
    "explain.erasure_steps": POSITIVE,
    "explain.max_target_tokens": POSITIVE,  # target steps of a translation explained per sentence
    "explain.figures": Switch(),
    "explain.max_examples_shown": POSITIVE,
}


def _pattern(key: str) -> re.Pattern:
    return re.compile(
        r"\.".join("[^.]+" if part == "*" else re.escape(part) for part in key.split("."))
    )


DECLARED: list[tuple[re.Pattern, Rule]] = [
    (_pattern(f"{group}.{key}" if group else key), rule)
    for group, keys in SCHEMA.items()
    for key, rule in keys.items()
]


def rule_for(key: str) -> Rule | None:
    """The declared rule of a full config key (`model.hidden_size`), None if none is declared."""
    return next((rule for pattern, rule in DECLARED if pattern.fullmatch(key)), None)


def declared_items(flat: Mapping[str, object]) -> Iterator[tuple[str, Rule, object]]:
    """(key, rule, value) of each key of a flat config that has a declared rule."""
    for key, value in flat.items():
        rule = rule_for(key)
        if rule is not None:
            yield key, rule, value


def fixed_by_run(key: str) -> bool:
    """Whether a finished run saved what it built from `key` (evaluate cannot change it)."""
    rule = rule_for(key)
    return rule is not None and rule.fixed_by_run


# The predict command's own settings (conf/predict.yaml), checked before it loads a run. Not in
# SCHEMA: no run's config holds them.
PREDICT: dict[str, Rule] = {
    "batch_size": POSITIVE,
    "max_figures": POSITIVE,
    "figures": Switch(),
    "attention": Switch(),
    "decode.beam_size": nullable(POSITIVE, "the run's decode.beam_size"),
    "decode.n_best": POSITIVE,
}
