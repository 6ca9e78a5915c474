"""Every rank's global random state in each checkpoint, read back weights-only and restored."""

import io
import random

import numpy as np
import pytest
import torch

from attnexp.errors import ConfigError
from attnexp.tasks.random_state import CHECKPOINT_KEY, collect, restore, saved_states


def draws() -> tuple:
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]


def test_a_restored_state_draws_again_what_followed_it():
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    np.random.randn()  # numpy's cached second gaussian is part of the state
    state = collect()
    expected = draws()
    torch.manual_seed(2), np.random.seed(2), random.seed(2)
    restore(state)
    assert draws() == expected


def test_the_state_is_read_back_by_a_weights_only_load():
    buffer = io.BytesIO()
    torch.save({CHECKPOINT_KEY: [collect()]}, buffer)
    buffer.seek(0)
    (state,) = torch.load(buffer, weights_only=True)[CHECKPOINT_KEY]
    expected = draws()
    restore(state)
    assert draws() == expected


def test_a_checkpoint_without_a_state_for_each_process_is_refused():
    with pytest.raises(ConfigError, match="last.ckpt holds no random state .*drop resume="):
        saved_states({"state_dict": {}}, "last.ckpt", 1)
    with pytest.raises(ConfigError, match="of 2 process.* this run has 1: .*trainer.devices"):
        saved_states({CHECKPOINT_KEY: [{}, {}]}, "last.ckpt", 1)
    assert saved_states({CHECKPOINT_KEY: [{"x": 1}]}, "last.ckpt", 1) == [{"x": 1}]
