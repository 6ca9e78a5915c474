"""attnexp.cli.compose: evaluate's and predict's command lines, composed and checked before Hydra."""

import pytest

from attnexp.cli.compose import compose_command_cfg
from attnexp.errors import ConfigError


@pytest.mark.parametrize(
    ("command", "overrides", "message"),
    [
        (
            "evaluate",
            ["ckpt_path=x", "data.batch_size=512"],
            r"^evaluate: data.batch_size=512 is not a setting of evaluate \(its own: ckpt_path, "
            r"overrides, seed, trainer.\*, paths.\*\); a setting of the run goes inside "
            r"overrides: 'overrides=\[\"data.batch_size=512\"\]'$",
        ),
        ("evaluate", ["+data.batch_size=512"], r"'overrides=\[\"data.batch_size=512\"\]'$"),
        ("evaluate", ["model=lstm_attn"], r"model=lstm_attn is not a setting of evaluate \(.*\)$"),
        (  # it said to put it in overrides=[...], where the run's trainer.* change nothing
            "evaluate",
            ["trainer.strategy=ddp_spawn"],
            r"trainer.strategy=ddp_spawn is not a setting of evaluate .*; evaluate tests with its "
            r"own trainer settings \(trainer.accelerator, trainer.devices, .*\), not the run's$",
        ),
        ("predict", ["trainer.devices=2"], r"; predict runs no Trainer \(it runs the model on"),
        (
            "evaluate",
            ["overrides=data.batch_size=512"],
            r"overrides takes a list, write 'overrides=\[\"data.batch_size=512\"\]'",
        ),
        ("evaluate", ["overrides=data.batch_size"], "overrides takes a list"),
        ("predict", ["no_such_key=1"], r"^predict: no_such_key=1 is not a setting of predict"),
        ("evaluate", ["seed=1,2"], r"^evaluate: Ambiguous value for argument 'seed=1,2'$"),
        (  # Hydra's parser alone said "no viable alternative at input '[data.batch_size='"
            "evaluate",
            ["overrides=[data.batch_size=0]"],
            r"no viable alternative .* \(overrides=\[data.batch_size=0\]: quote each setting, "
            r"'overrides=\[\"key=value\", ...\]'\)$",
        ),
        (  # the hint is about overrides=, whatever comes before it
            "evaluate",
            ["ckpt_path=x", "overrides=[data.batch_size=0]"],
            r"\(overrides=\[data.batch_size=0\]: quote each setting, ",
        ),
    ],
)
def test_command_line_overrides_are_said_in_one_line(command, overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        compose_command_cfg(command, overrides)
    assert "\n" not in str(err.value) and "use +" not in str(err.value)


def test_run_settings_go_inside_overrides():
    cfg = compose_command_cfg("evaluate", ['overrides=["data.batch_size=512"]', "seed=3"])
    assert list(cfg.overrides) == ["data.batch_size=512"] and cfg.seed == 3
    # Hydra's own settings are not the run's: adding one is Hydra's business
    cfg = compose_command_cfg("predict", ["ckpt_path=x", "+hydra.job.env_set.FOO=1"])
    assert cfg.ckpt_path == "x"


@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_overrides_that_a_finished_run_cannot_take_are_named(command):
    """The run's saved tokenizer wins: these were accepted and changed nothing."""
    line = 'overrides=["data.vocab_size=50","data.lowercase=false","data.batch_size=8"]'
    with pytest.raises(ConfigError) as refused:
        compose_command_cfg(command, ["ckpt_path=x", line])
    said = str(refused.value)
    assert said.startswith(f"{command}: overrides=['data.vocab_size=50', 'data.lowercase=false']")
    assert "fixes data.vocab_size, data.lowercase" in said and "batch_size" not in said
    compose_command_cfg(command, ["ckpt_path=x", 'overrides=["data.batch_size=8"]'])
