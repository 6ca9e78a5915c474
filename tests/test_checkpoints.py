import json

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from attnexp.checkpoints import (
    apply_overrides,
    find_checkpoint,
    given_ckpt_path,
    load_choices,
    load_run,
    load_weights,
    read_weights,
    run_dir_of,
)
from attnexp.errors import ConfigError


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


def test_run_dir_without_best_falls_back_to_last(run_dir):
    (run_dir / "metrics.json").unlink()
    assert find_checkpoint(run_dir).name == "last.ckpt"
    (run_dir / "checkpoints" / "last.ckpt").unlink()
    with pytest.raises(ConfigError, match="no checkpoint"):
        find_checkpoint(run_dir)


def test_a_missing_best_checkpoint_or_record_is_an_error_not_a_fallback(run_dir):
    (run_dir / "checkpoints" / "best.ckpt").unlink()
    with pytest.raises(ConfigError, match=r"best checkpoint checkpoints/best.ckpt .* is missing"):
        find_checkpoint(run_dir)  # not silently the last checkpoint
    (run_dir / "metrics.json").write_text('{"best_ckpt": ')
    with pytest.raises(ConfigError, match=r"metrics.json cannot be read"):
        find_checkpoint(run_dir)


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
    (tmp_path / "bad.ckpt").write_text("{}")
    with pytest.raises(ConfigError, match="not a readable Lightning checkpoint"):
        read_weights(tmp_path / "bad.ckpt")
    with pytest.raises(ConfigError, match="ckpt_path is missing"):
        given_ckpt_path(OmegaConf.create({"ckpt_path": "???"}))


def test_overrides_must_name_existing_keys():
    cfg = OmegaConf.create({"data": {"batch_size": 8}})
    OmegaConf.set_struct(cfg, True)
    apply_overrides(cfg, ["data.batch_size=16", "+data.extra=[1, 2]", "data.batch_size=null"])
    assert cfg.data.batch_size is None and list(cfg.data.extra) == [1, 2]
    with pytest.raises(
        ConfigError, match=r"no key 'data.batch_sise' \(keys under 'data': batch_size, extra\)"
    ):
        apply_overrides(cfg, ["data.batch_sise=1"])
    with pytest.raises(ConfigError, match="not key=value"):
        apply_overrides(cfg, ["data.batch_size"])
