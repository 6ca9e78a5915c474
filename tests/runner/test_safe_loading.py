"""A crafted checkpoint in a run dir never runs its code: resume, evaluate and predict all load
checkpoints with torch's weights-only unpickler, and refuse one that needs more."""

import pickle
from pathlib import Path

import pytest
import torch

from attnexp.errors import ConfigError
from attnexp.files import checkpoint_value
from attnexp.runner.load import read_weights
from tests.cli_helpers import TINY, run_cli


class Payload:
    """Unpickled, it would create `marker`: the code a crafted checkpoint could run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def craft(path: Path, marker: Path) -> Path:
    """A torch.save file, as a real checkpoint is, that holds the payload beside its entries."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"global_step": 3, "epoch": 0, "state_dict": {}, "evil": Payload(marker)}, path)
    return path


@pytest.fixture(scope="module")
def crafted_run(tmp_path_factory):
    """A real tiny run whose last.ckpt was then replaced by a crafted pickle."""
    tmp = tmp_path_factory.mktemp("crafted")
    result = run_cli(tmp, *TINY)
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp / "outputs" / "runs").iterdir()
    marker = tmp / "payload-ran"
    craft(run_dir / "checkpoints" / "last.ckpt", marker)
    return tmp, run_dir, marker


def test_the_loaders_refuse_a_crafted_checkpoint(tmp_path):
    marker = tmp_path / "payload-ran"
    ckpt = craft(tmp_path / "evil.ckpt", marker)
    with pytest.raises(pickle.UnpicklingError):
        checkpoint_value(ckpt, "global_step")
    with pytest.raises(ConfigError, match="evil.ckpt"):
        read_weights(ckpt)
    assert not marker.exists()


def test_resume_refuses_a_crafted_last_checkpoint(crafted_run):
    tmp, run_dir, marker = crafted_run
    result = run_cli(tmp, *TINY, f"resume={run_dir}", "trainer.max_epochs=2")
    assert result.returncode != 0
    assert "last.ckpt is not a readable checkpoint" in result.stderr
    assert not marker.exists()


def test_evaluate_refuses_a_crafted_checkpoint(crafted_run):
    """(predict loads its weights with the same read_weights, tested above)"""
    tmp, run_dir, marker = crafted_run
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    result = subprocess_cli(tmp, "attnexp.evaluate", f"ckpt_path={ckpt}")
    assert result.returncode != 0
    assert "last.ckpt is not a Lightning checkpoint" in result.stderr
    assert not marker.exists()


def subprocess_cli(tmp: Path, module: str, *args: str):
    import os
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
