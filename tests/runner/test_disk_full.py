"""A run whose disk fills up ends with one paragraph, a failed record, and no truncated
checkpoint (a 2 MiB tmpfs as paths.log_dir; needs root to mount it, skipped otherwise)."""

import json
import subprocess

import pytest
import torch
from cli_helpers import TINY, run_cli


@pytest.fixture
def tiny_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)])


def test_a_full_disk_ends_the_run_cleanly(tmp_path, tiny_disk):
    # a checkpoint of hidden size 256 is ~2 MB: the first one fills the disk
    args = [a for a in TINY if not a.startswith("model.hidden_size")]
    result = run_cli(tmp_path, *args, "model.hidden_size=256", f"paths.log_dir={tiny_disk}")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stderr.count("error:") == 1
    assert "no space left on the disk holding" in result.stderr
    assert "paths.log_dir=" in result.stderr  # what to do
    (run_dir,) = (tiny_disk / "runs").iterdir()
    record = json.loads((run_dir / "metrics.json").read_text())
    assert record["status"] == "failed" and "no space left" in record["error"]
    for ckpt in run_dir.rglob("*ckpt*"):  # whatever is there under a name is whole
        torch.load(ckpt, weights_only=True)


def test_disk_full_reads_any_chain_of_causes(tmp_path):
    from attnexp.runner.train import disk_full

    first, second = ValueError("a"), RuntimeError("b")
    first.__context__, second.__context__ = second, first  # a chain that loops back
    assert disk_full(first, tmp_path) is None
    full = OSError(28, "No space left on device", "x.ckpt")
    wrapped = RuntimeError("saving failed")
    wrapped.__cause__ = full
    assert "no space left on the disk holding" in str(disk_full(wrapped, tmp_path))
