"""The declared ranges of the settings in conf/: one table per config group (`SCHEMA`), the one
place where what a key may hold is written down.

The command line checks every declared key of a composed config before torch loads
(`attnexp.runner.settings.check_declared`), so a key gets its check by being declared here, and
`tests/test_schema.py` walks every numeric key of every option in conf/ to find one that is not.
A rule names the key it is given, its range and what to set; a key may also be marked
`fixed_by_run`: the run saves what it builds from it (its tokenizer), so evaluating a finished run
with another value changes nothing and is refused.

The rules themselves are in `attnexp.rules`.
"""

import re
from collections.abc import Iterator, Mapping

from attnexp.rules import (
    BATCHES,
    COUNT,
    FRACTION,
    NON_NEGATIVE,
    POSITIVE,
    POSITIVE_REAL,
    PROBABILITY,
    RATE,
    SEED,
    SHARE,
    TOKENIZER,
    Either,
    ListOf,
    Number,
    Renamed,
    Rule,
    Switch,
    Text,
    Word,
    fixed,
    nullable,
)

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
