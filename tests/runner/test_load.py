import json
from pathlib import Path

import pytest
import torch
import yaml
from cli_helpers import run_cli
from omegaconf import OmegaConf

from attnexp.cli.compose import compose_command_cfg
from attnexp.cli.evaluate import evaluation_summary
from attnexp.errors import ConfigError
from attnexp.runner.evaluate import evaluate
from attnexp.runner.load import (
    apply_overrides,
    find_checkpoint,
    given_ckpt_path,
    load_choices,
    load_run,
    load_weights,
    read_weights,
    run_dir_of,
    run_settings_hint,
)


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / "checkpoints").mkdir()
    cfg = {
        "seed": 0,
        "paths": {"output_dir": "${hydra:runtime.output_dir}", "data_dir": "data"},
        "data": {"batch_size": 8, "seed": "${seed}"},
    }
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    choices = {"hydra": {"runtime": {"choices": {"model": "bag_attn", "hydra/launcher": "basic"}}}}
    (run / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(choices))
    for name in ("last.ckpt", "best.ckpt"):
        (run / "checkpoints" / name).write_bytes(b"")
    (run / "metrics.json").write_text(json.dumps({"best_ckpt": "checkpoints/best.ckpt"}))
    return run


def test_load_run_from_a_run_dir_or_a_checkpoint(run_dir, tmp_path):
    cfg, choices, found_dir, ckpt = load_run(
        run_dir, ["data.batch_size=32"], output_dir=tmp_path / "eval"
    )
    assert found_dir == run_dir and ckpt.name == "best.ckpt"
    assert cfg.data.batch_size == 32 and cfg.data.seed == 0
    assert cfg.paths.output_dir == str(tmp_path / "eval")  # never the run dir
    assert choices == {"model": "bag_attn"}
    assert load_run(run_dir / "checkpoints" / "last.ckpt")[3].name == "last.ckpt"
    assert load_choices(tmp_path) == {}


def test_the_loaded_run_config_refuses_keys_it_lacks(run_dir):
    """Struct mode: a key the run's config lacks is an error to read or set, not a silent None
    (or a new key) that builds another model than the run's."""
    cfg = load_run(run_dir)[0]
    with pytest.raises(AttributeError, match="batch_sise"):
        cfg.data.batch_sise  # noqa: B018
    with pytest.raises(AttributeError, match="batch_sise"):
        cfg.data.batch_sise = 3


def test_a_run_with_seed_null_is_rebuilt_with_the_seed_it_drew(run_dir):
    """seed=null: the saved config says null, the record the seed the run drew; its test bags
    came from that seed, so a re-evaluation must use it (not draw another)."""
    config = run_dir / ".hydra" / "config.yaml"
    config.write_text(config.read_text().replace("seed: 0", "seed: null"))
    (run_dir / "metrics.json").write_text(
        json.dumps({"best_ckpt": "checkpoints/best.ckpt", "seed": 7})
    )
    cfg = load_run(run_dir)[0]
    assert cfg.seed == 7 and cfg.data.seed == 7


@pytest.mark.parametrize(
    ("override", "message"),
    [
        # each set the section to a string, and failed deep in instantiate
        (
            "model=lstm_attn",
            r"override model=lstm_attn: model is a config group, and the run was "
            r"trained with model=bag_attn; overrides change single keys .*\(model.<key>=...\)",
        ),
        ("+scorer=dot", r"override \+scorer=dot: scorer is a config group, .* scorer=additive"),
        ("seed=-1", r"override seed=-1: seed=-1 must be a whole number from 0 to 2\*\*32 - 1"),
        ("data.seed=1.5", r"override data.seed=1.5: data.seed=1.5 must be a whole number"),
        ("+data.split_seed=-1", r"override \+data.split_seed=-1: data.split_seed=-1 must be a"),
    ],
)
def test_overrides_that_cannot_rebuild_the_run_are_said(run_dir, override, message):
    hydra_file = run_dir / ".hydra" / "hydra.yaml"
    choices = {"model": "bag_attn", "scorer": "additive", "hydra/launcher": "basic"}
    hydra_file.write_text(yaml.safe_dump({"hydra": {"runtime": {"choices": choices}}}))
    with pytest.raises(ConfigError, match=message):
        load_run(run_dir, [override])
    load_run(run_dir, ["seed=3", "data.seed=4"])


def test_run_dir_without_best_falls_back_to_last(run_dir, caplog):
    (run_dir / "metrics.json").unlink()
    assert find_checkpoint(run_dir).name == "last.ckpt"
    assert f"{run_dir}: no best checkpoint recorded; using checkpoints/last.ckpt" in caplog.text
    (run_dir / "checkpoints" / "last.ckpt").unlink()
    with pytest.raises(ConfigError, match="no checkpoint"):
        find_checkpoint(run_dir)


def test_a_checkpoint_file_that_is_not_there_is_an_error_not_the_runs_best(run_dir):
    """A misspelt .ckpt inside a run dir stands for nothing: without the existence check it was
    taken for the folder it lies in, and evaluate went on with the run's best checkpoint."""
    with pytest.raises(ConfigError, match=r"ckpt_path=.*epoch003.ckpt does not exist"):
        find_checkpoint(run_dir / "checkpoints" / "epoch003.ckpt")


def test_a_missing_best_checkpoint_or_record_is_an_error_not_a_fallback(run_dir):
    (run_dir / "checkpoints" / "best.ckpt").unlink()
    with pytest.raises(ConfigError, match=r"best checkpoint checkpoints/best.ckpt .* is missing"):
        find_checkpoint(run_dir)  # not silently the last checkpoint
    (run_dir / "metrics.json").write_text('{"best_ckpt": ')
    with pytest.raises(ConfigError, match=r"metrics.json cannot be read"):
        find_checkpoint(run_dir)


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("config.yaml", "model: [unclosed\n", r"while parsing a flow sequence"),
        ("config.yaml", "- a list\n", r"it holds a ListConfig, not a mapping"),
        ("hydra.yaml", "hydra: {runtime: \n", r"while parsing"),
    ],
)
def test_a_damaged_run_config_is_said_not_a_yaml_traceback(run_dir, name, content, problem):
    (run_dir / ".hydra" / name).write_text(content)
    with pytest.raises(ConfigError, match=rf"{name} cannot be read \({problem}.*damaged"):
        load_run(run_dir)


def test_a_run_dir_under_home_can_be_given_with_a_tilde(run_dir, monkeypatch):
    monkeypatch.setenv("HOME", str(run_dir.parent))
    assert find_checkpoint("~/run") == run_dir / "checkpoints" / "best.ckpt"
    assert find_checkpoint("~/run/checkpoints/last.ckpt") == run_dir / "checkpoints" / "last.ckpt"


def test_the_run_dir_is_the_folder_holding_the_run(run_dir):
    (run_dir / "checkpoints" / ".hydra").mkdir()  # what a later command might have written
    (run_dir / "checkpoints" / ".hydra" / "config.yaml").write_text("seed: 1\n")
    assert run_dir_of(run_dir / "checkpoints" / "best.ckpt") == run_dir


def test_checkpoint_weights_must_be_readable_and_fit(tmp_path):
    model = torch.nn.Linear(4, 2)
    torch.save({"state_dict": model.state_dict()}, tmp_path / "ok.ckpt")
    load_weights(torch.nn.Linear(4, 2), tmp_path / "ok.ckpt")
    with pytest.raises(ConfigError, match=r"does not fit .*size mismatch for weight.*drop it"):
        load_weights(torch.nn.Linear(8, 2), tmp_path / "ok.ckpt")
    # another model's checkpoint (no override given) was blamed on an override
    torch.save({"state_dict": torch.nn.Bilinear(4, 4, 2).state_dict()}, tmp_path / "other.ckpt")
    with pytest.raises(ConfigError, match=r"does not fit .*: the checkpoint is another model's"):
        load_weights(torch.nn.Linear(4, 2), tmp_path / "other.ckpt")
    (tmp_path / "bad.ckpt").write_text("{}")
    with pytest.raises(ConfigError, match="bad.ckpt is not a Lightning checkpoint") as err:
        read_weights(tmp_path / "bad.ckpt")
    assert "\n" not in str(err.value) and "weights_only" not in str(err.value)  # not torch's
    assert "give ckpt_path=<a run dir, or a .ckpt in its checkpoints/>" in str(err.value)
    with pytest.raises(ConfigError, match="ckpt_path is missing"):
        given_ckpt_path(OmegaConf.create({"ckpt_path": "???"}))


@pytest.mark.parametrize(("given", "shown"), [(None, "null"), ("", "''"), ("  ", "'  '")])
def test_a_ckpt_path_that_names_no_path_is_refused(given, shown):
    """Read as a path, an empty ckpt_path is the current folder (predict compared every run
    below it) and null the string 'None'."""
    with pytest.raises(ConfigError, match=rf"^ckpt_path={shown} names no path: give ckpt_path="):
        given_ckpt_path(OmegaConf.create({"ckpt_path": given}))
    assert given_ckpt_path(OmegaConf.create({"ckpt_path": "runs/r"})) == "runs/r"


class Touch:
    """Unpickled, it creates a file: code that a .ckpt from elsewhere could carry."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return Path.touch, (self.path,)


def test_reading_a_checkpoint_runs_no_code_stored_in_it(tmp_path):
    marker = tmp_path / "ran"
    state = {"state_dict": torch.nn.Linear(4, 2).state_dict(), "callbacks": Touch(marker)}
    torch.save(state, tmp_path / "code.ckpt")
    with pytest.raises(ConfigError, match=r"code.ckpt is not a Lightning checkpoint \(.ckpt\)"):
        read_weights(tmp_path / "code.ckpt")
    assert not marker.exists()


def test_overrides_must_name_existing_keys():
    cfg = OmegaConf.create({"data": {"batch_size": 8}})
    OmegaConf.set_struct(cfg, True)
    apply_overrides(cfg, ["data.batch_size=16", "+data.extra=[1, 2]", "data.batch_size=null"])
    assert cfg.data.batch_size is None and list(cfg.data.extra) == [1, 2]
    with pytest.raises(
        ConfigError, match=r"no key 'data.batch_sise' \(keys under 'data': batch_size, extra\)"
    ):
        apply_overrides(cfg, ["data.batch_sise=1"])
    with pytest.raises(ConfigError, match=r"^overrides: 'data.batch_size' is not key=value \(give"):
        apply_overrides(cfg, ["data.batch_size"])


def test_an_override_replaces_a_section_whole():
    """`key={...}` sets the section to what is given, as on the command line: merged into the
    saved one, keys it no longer holds stayed (a scorer's or scheduler's old arguments)."""
    cfg = OmegaConf.create({"scheduler": {"_target_": "A", "warmup_ratio": 0.1}})
    apply_overrides(cfg, ["scheduler={_target_: B}"])
    assert OmegaConf.to_container(cfg.scheduler) == {"_target_": "B"}


def test_a_checkpoint_outside_a_run_with_its_config_is_refused(tmp_path):
    """A .ckpt with no run above it, or beside a record but no .hydra/config.yaml, has no config
    to rebuild its model from: said, not a TypeError or a missing-file error later."""
    (tmp_path / "loose.ckpt").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"loose.ckpt: no run config \(.hydra/config.yaml\)"):
        run_dir_of(tmp_path / "loose.ckpt")
    (tmp_path / "metrics.json").write_text("{}")  # holds a record, but no config
    with pytest.raises(ConfigError, match=r"loose.ckpt: no run config"):
        run_dir_of(tmp_path / "loose.ckpt")


def test_a_folder_inside_a_run_stands_for_the_run(run_dir):
    assert find_checkpoint(run_dir / "checkpoints").name == "best.ckpt"
    (run_dir / "checkpoints" / "sub").mkdir()
    assert load_run(run_dir / "checkpoints" / "sub")[2:] == (
        run_dir,
        run_dir / "checkpoints" / "best.ckpt",
    )


def test_errors_about_run_settings_say_where_they_go():
    """evaluate and predict take a run's settings inside overrides=[...]: an error naming one
    (data.x=...) says so, and is still a ConfigError."""
    with pytest.raises(ConfigError) as err, run_settings_hint("evaluate"):
        raise ConfigError("data.max_seq_len=0 must be positive")
    assert str(err.value) == (
        "data.max_seq_len=0 must be positive (evaluate takes run settings as "
        "'overrides=[\"key=value\"]')"
    )
    with run_settings_hint("evaluate"):
        pass  # nothing raised: nothing said


def test_evaluate_never_writes_into_the_run_dir(run_dir):
    """evaluate() given the run dir as its own dir (the CLI's guard refuses hydra.run.dir= there
    first) would set the run's record aside as an earlier attempt's and write its own."""
    before = (run_dir / "metrics.json").read_text()
    cfg = compose_command_cfg("evaluate", [f"ckpt_path={run_dir}"])
    with pytest.raises(ConfigError, match=rf"^hydra.run.dir={run_dir} is the run dir itself"):
        evaluate(cfg, run_dir, [f"ckpt_path={run_dir}"])
    assert (run_dir / "metrics.json").read_text() == before
    assert sorted(p.name for p in run_dir.iterdir()) == [".hydra", "checkpoints", "metrics.json"]


def test_evaluate_command_line_is_checked_before_hydra(tmp_path):
    result = run_cli(
        tmp_path, "ckpt_path=nowhere", "data.batch_size=512", module="attnexp.evaluate"
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith(
        "error: evaluate: data.batch_size=512 is not a setting of evaluate"
    )
    assert "+data.batch_size" not in result.stderr  # Hydra's advice


def test_evaluate_summary_shows_every_test_metric():
    data = {
        "ckpt": "run/checkpoints/best.ckpt",
        "metrics": {"test/loss": 0.7, "test/acc_bag10": 0.5, "test/acc_bag2": 0.25, "test/f1": 0.5},
        "run_metrics": {"test/loss": 0.6875, "test/acc_bag2": 0.25, "val/acc": 1.0},
    }
    lines = evaluation_summary(data, Path("evals/x")).splitlines()[3:]
    assert [line.split() for line in lines] == [
        ["test/acc_bag2", "0.2500", "0.2500"],
        ["test/acc_bag10", "0.5000", "-"],
        ["test/f1", "0.5000", "-"],
        ["test/loss", "0.7000", "0.6875"],
    ]
    assert len({len(line) for line in lines}) == 1  # the run's column lines up
    # another checkpoint than the run's best: the run column says whose metrics it holds
    other = {
        **data,
        "ckpt": "run/checkpoints/last.ckpt",
        "run_metrics_ckpt": "checkpoints/best.ckpt",
    }
    assert evaluation_summary(other, Path("evals/x")).splitlines()[2] == (
        "run:        the run's own test of its best checkpoint, checkpoints/best.ckpt"
    )
    # a run metric of 0 is a value, not a missing one
    zero = {**data, "run_metrics": {"test/loss": 0.0}}
    last = evaluation_summary(zero, Path("evals/x")).splitlines()[-1]
    assert last.split() == ["test/loss", "0.7000", "0.0000"]
