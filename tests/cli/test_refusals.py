"""A command line no run can use is refused by the command itself: one message, before torch
loads and before Hydra makes a run dir, so nothing is left in outputs/."""

import time

import pytest
from cli_helpers import RUN_MODULES, run_counting_imports

from attnexp.errors import ConfigError
from attnexp.runner import settings


def refused(tmp_path, *args: str):
    result, imported = run_counting_imports(
        ["-m", "attnexp", *args, f"paths.log_dir={tmp_path}/outputs"], tmp_path
    )
    assert result.returncode == 2, result.stderr
    assert not imported & RUN_MODULES, "refused only after torch loaded"
    assert not (tmp_path / "outputs").exists(), "a refused run left a dir behind"
    return result.stderr


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["trainer.max_epochs=abc"], "trainer.max_epochs='abc'"),
        (["trainer.threads=0"], "trainer.threads=0"),
        (["optimizer.lr=-1"], "optimizer.lr=-1"),
        (["-m", "model=bag_attn", "trainer.max_epochs=abc,3"], "trainer.max_epochs='abc'"),
        (["trainer.limit_train_batches=5", "trainer.val_check_interval=10"], "val_check_interval"),
    ],
    ids=["type", "threads", "lr", "sweep", "interval"],
)
def test_a_bad_value_is_refused_before_anything_loads(tmp_path, args, named):
    assert named in refused(tmp_path, *args)


@pytest.mark.parametrize(
    "args",
    [
        ["model=seq2seq", "decode.max_len=0"],
        ["model=seq2seq", "decode.alpha=-5"],
        ["model=seq2seq", 'task.probe_pairs=[["x"]]'],
        ["model.hidden_size=0"],
    ],
    ids=["max_len", "alpha", "probe_pairs", "hidden_size"],
)
def test_a_declared_range_is_refused_at_once(tmp_path, args):
    """These were refused only after torch loaded (8-16 s), leaving a failed run dir, or not at
    all (alpha): every declared range is now checked by the command line (tests/test_schema.py
    walks them all)."""
    start = time.perf_counter()
    stderr = refused(tmp_path, *args)
    assert time.perf_counter() - start < 3.0, "refused, but not at once"
    assert stderr.count("error:") == 1 and args[-1].split("=")[0] in stderr, stderr


def test_a_misspelt_key_gets_one_message_ours(tmp_path):
    stderr = refused(tmp_path, "model.hiden_size=8")
    assert "did you mean model.hidden_size" in stderr
    assert "To append to your config use" not in stderr  # Hydra's contradicting advice
    assert stderr.count("error:") == 1


def test_more_cpu_processes_than_cores_are_refused(monkeypatch, compose_cfg):
    monkeypatch.setattr(settings, "available_cores", lambda: 2)
    cfg = compose_cfg("trainer=ddp_cpu", "trainer.devices=4")
    with pytest.raises(ConfigError, match=r"trainer\.devices=4 .* 2 cores .*trainer\.devices=2"):
        settings.check_devices(cfg.trainer, on_cpu=True)
    settings.check_devices(cfg.trainer, on_cpu=False)  # GPUs: Lightning counts them
