"""Every numeric key of every option in conf/ is checked from its declaration (attnexp.schema)
before torch loads: each is set to 0, to a negative number and to a word, and the check that the
command line runs must refuse it naming the key, unless the value is listed in ALLOWED with the
reason it is a setting. The command line's own path (no torch, nothing in outputs/, in under 3 s)
is tested in tests/cli/test_refusals.py."""

from pathlib import Path

import attnexp.conf
import pytest
from hydra import compose
from omegaconf import OmegaConf

from attnexp.errors import ConfigError
from attnexp.rules import Either, ListOf, Number, Renamed, Rule
from attnexp.runner.config import package_configs
from attnexp.runner.settings import check_values
from attnexp.runs.flatten import flat_config
from attnexp.schema import DECLARED, rule_for

CONF = Path(attnexp.conf.__file__).parent
BAD = (0, -1, "x")
# Values among BAD that are settings, with what they mean: key -> {value: reason}.
SEED = {0: "a seed like any other"}
ALLOWED: dict[str, dict[object, str]] = {
    "seed": SEED,
    "data.seed": SEED,
    "data.split_seed": SEED,
    "data.num_workers": {0: "load batches in the training process"},
    "data.shift": {0: "no random translation of the digits"},
    "data.eval_variable_max": {0: "no variable-size test set"},
    "data.val_bleu_sources": {0: "no val/bleu, validation loss and accuracy only"},
    "model.dropout": {0: "no dropout"},
    "model.embed_dropout": {0: "no dropout"},
    "model.attn_dropout": {0: "no dropout"},
    "model.attention_dropout": {0: "no dropout"},
    "model.teacher_forcing": {0: "the decoder always reads its own guesses"},
    "optimizer.momentum": {0: "plain SGD"},
    "scheduler.warmup_ratio": {0: "no warmup"},
    "task.weight_decay": {0: "no weight decay"},
    "task.label_smoothing": {0: "plain cross-entropy"},
    "task.alpha": {0: "no length penalty"},
    "decode.alpha": {0: "no length penalty"},
    "trainer.max_epochs": {-1: "no limit (trainer.max_steps ends the run)"},
    "trainer.max_steps": {-1: "no limit (trainer.max_epochs ends the run)"},
    "trainer.min_epochs": {0: "no minimum"},
    "trainer.devices": {-1: "every device there is"},
    "trainer.limit_val_batches": {0: "never validate"},
    "trainer.limit_test_batches": {0: "test nothing (test=false says it better)"},
    "trainer.overfit_batches": {0: "off"},
    "trainer.gradient_clip_val": {0: "no clipping"},
    "callbacks.model_checkpoint.save_top_k": {0: "keep no best checkpoint", -1: "keep all"},
    "callbacks.early_stopping.patience": {0: "stop at the first validation without gain"},
    "callbacks.early_stopping.min_delta": {0: "any gain counts"},
}


def options() -> list[str]:
    """`group=option` for every yaml in conf/ (conf/hydra/ aside: Hydra's own settings)."""
    found = []
    for path in sorted(CONF.rglob("*.yaml")):
        parts = path.relative_to(CONF).with_suffix("").parts
        if len(parts) > 1 and parts[0] != "hydra":
            found.append(f"{parts[0]}={'/'.join(parts[1:])}")
    return found


def numeric(rule: Rule | None) -> bool:
    if isinstance(rule, Either):
        return any(numeric(option) for option in rule.options)
    return isinstance(rule, Number) or (isinstance(rule, ListOf) and numeric(rule.item))


@pytest.fixture(scope="module")
def composed() -> tuple[dict[str, tuple[str, object]], set[str]]:
    """(every numeric key of every composed option: key -> (the option it was found with, the
    config); every key of them all). A key whose value is null or taken from another key counts
    as numeric when it is declared as a number."""
    found: dict[str, tuple[str, object]] = {}
    every: set[str] = set()
    with package_configs():
        for option in options():
            try:
                cfg = compose("train", overrides=[option])
            except Exception as err:  # a Hydra plugin from an extra (the Optuna sweeper)
                assert "hydra/sweeper" in str(err), (option, err)
                continue
            flat = flat_config(OmegaConf.to_container(cfg, resolve=False))
            every |= set(flat)
            for key, value in flat.items():
                number = isinstance(value, int | float) and not isinstance(value, bool)
                if key not in found and (number or numeric(rule_for(key))):
                    found[key] = (option, cfg)
    return found, every


@pytest.fixture(scope="module")
def keys(composed) -> dict[str, tuple[str, object]]:
    return composed[0]


def refusal(cfg, key: str, value: object) -> str | None:
    bad = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    OmegaConf.update(bad, key, value, merge=False)
    try:
        check_values(bad)
    except ConfigError as err:
        return str(err)
    return None


def test_every_numeric_key_refuses_zero_negative_and_words_unless_allowed(keys):
    assert {"decode.max_len", "data.max_tokens", "model.hidden_size", "data.batch_size"} <= set(
        keys
    )
    wrong = []
    for key, (option, cfg) in sorted(keys.items()):
        for value in BAD:
            said = refusal(cfg, key, value)
            allowed = value in ALLOWED.get(key, {}) and type(value) is int
            if said is None and not allowed:
                wrong.append(f"{key}={value!r} ({option}) is accepted: declare its range")
            elif said is not None and allowed:
                wrong.append(f"{key}={value!r} ({option}) is refused, but ALLOWED says: {said}")
            elif said is not None and f"{key}={value!r}" not in said:
                wrong.append(f"{key}={value!r} ({option}): the refusal names another key: {said}")
    assert not wrong, "\n".join(wrong)


def test_every_declaration_names_a_key_of_some_option(composed):
    """A declared key that no option has (a renamed key not marked `Renamed`) would check
    nothing; a renamed one is in no option, and its new name is declared."""
    every = composed[1]
    live = [(p, rule) for p, rule in DECLARED if not isinstance(rule, Renamed)]
    dead = [p.pattern for p, _ in live if not any(p.fullmatch(k) for k in every)]
    assert not dead, dead
    for pattern, rule in DECLARED:
        if isinstance(rule, Renamed):
            assert not any(pattern.fullmatch(k) for k in every), pattern.pattern
            assert rule.to in every and rule_for(rule.to) is not None, rule.to


@pytest.mark.parametrize(("old", "new"), [("heads", "num_heads"), ("depth", "num_layers")])
def test_a_renamed_key_is_refused_with_its_new_name(keys, old, new):
    """In a config (`+model.heads=`, a yaml of one's own) before torch; typed as a setting, Hydra
    refuses it and the command line names the new key (tests/cli/test_overrides.py)."""
    _, cfg = keys[f"model.{new}"]
    bad = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    OmegaConf.update(bad, f"model.{old}", 2, force_add=True)
    with pytest.raises(
        ConfigError, match=rf"^model\.{old} is now called model\.{new} \(set model\.{new}=2"
    ):
        check_values(bad)


def test_a_value_set_through_an_interpolation_names_the_key_that_set_it(keys):
    _, cfg = keys["decode.max_len"]
    bad = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    bad.decode.beam_size = 0
    with pytest.raises(ConfigError, match=r"^decode\.beam_size=0 .*task\.beam_size"):
        check_values(bad)


@pytest.mark.parametrize(
    ("value", "ok"),
    [([["a", "b"]], True), ([["x"]], False), ([], False), ([["a", 1]], False), ("a", False)],
)
def test_probe_pairs_are_pairs_of_strings(value, ok):
    rule = rule_for("task.probe_pairs")
    assert rule.accepts(value) is ok
    assert rule.accepts(None)
