"""A checkpoint is written whole under its name, or not at all."""

import errno

import pytest
import torch

from attnexp.tasks import checkpoint_io
from attnexp.tasks.checkpoint_io import AtomicCheckpointIO


def test_a_checkpoint_is_written_whole(tmp_path):
    path = tmp_path / "checkpoints" / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"global_step": 7}, path)
    assert torch.load(path, weights_only=True) == {"global_step": 7}
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]


def test_a_write_that_fails_leaves_nothing_under_the_final_name(tmp_path, monkeypatch):
    path = tmp_path / "best.ckpt"
    path.write_bytes(b"the earlier best")

    def full_disk(obj, f):
        f.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_io.torch, "save", full_disk)
    with pytest.raises(OSError, match="best.ckpt") as err:
        AtomicCheckpointIO().save_checkpoint({"global_step": 7}, path)
    assert err.value.errno == errno.ENOSPC
    assert path.read_bytes() == b"the earlier best"  # the earlier file is untouched
    assert [p.name for p in tmp_path.iterdir()] == ["best.ckpt"]
