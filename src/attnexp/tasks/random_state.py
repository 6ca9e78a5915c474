"""The global random state of a run in its checkpoints, so that a resumed run draws what the
uninterrupted one would have drawn (dropout masks, sampled teacher forcing) to the last digit.

Saved with every checkpoint, one entry per rank: torch's CPU generator and, where CUDA is in use,
its device generators, numpy's and Python's global ones. Our own draws (training bags, batch
orders, shifts, the loaders' worker seeds) come from generators seeded per (seed, epoch)
(`data/seeds.py`), which the data restore from the loader's position, not from here.

Restored at the first training batch after a resume: in the uninterrupted run nothing draws
between a checkpoint (written at a validation's end, or at an epoch's end) and the next training
batch. What the resumed run draws before that batch (building the model, its loaders) is drawn
over.
"""

import random

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.trainer.states import TrainerFn

from attnexp.errors import ConfigError

CHECKPOINT_KEY = "random_states"  # top-level key of a checkpoint: a list, one state per rank


def collect() -> dict:
    """The global random state of this process, in types a weights-only load reads back."""
    numpy_state = np.random.get_state(legacy=False)
    return {
        "torch": torch.get_rng_state(),
        # only a process that used CUDA drew from it (asking would initialise CUDA in any other)
        "torch.cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [],
        "numpy": {
            "key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
            "pos": int(numpy_state["state"]["pos"]),
            "has_gauss": int(numpy_state["has_gauss"]),
            "gauss": float(numpy_state["gauss"]),
        },
        "python": random.getstate(),
    }


def restore(state: dict) -> None:
    """Sets the global random state `collect` returned."""
    torch.set_rng_state(state["torch"])
    if state["torch.cuda"]:
        torch.cuda.set_rng_state_all(state["torch.cuda"])
    numpy_state = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": "MT19937",
            "state": {
                "key": numpy_state["key"].numpy().astype(np.uint32),
                "pos": numpy_state["pos"],
            },
            "has_gauss": numpy_state["has_gauss"],
            "gauss": numpy_state["gauss"],
        }
    )
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def saved_states(checkpoint: dict, path: str, world_size: int) -> list[dict]:
    """The per-rank random states of a checkpoint, refused when it has none (saved by an earlier
    version) or has them for another number of processes: the resumed run would not draw what
    the uninterrupted one drew."""
    states = checkpoint.get(CHECKPOINT_KEY)
    if states is None:
        raise ConfigError(
            f"{path} holds no random state (it was saved by an earlier version of attnexp), so a "
            f"run resumed from it would not draw the dropout masks and samples the uninterrupted "
            f"run would: it is not resumed. Test it with python -m attnexp.evaluate, or start a "
            f"new run (drop resume=)"
        )
    if len(states) != world_size:
        raise ConfigError(
            f"{path} holds the random state of {len(states)} process(es), and this run has "
            f"{world_size}: resume it with the trainer.devices (and trainer.num_nodes) it ran with"
        )
    return states


def per_rank(trainer: pl.Trainer, value: object) -> list:
    """`value` of every rank, in rank order, for the checkpoint that rank 0 writes. Every rank
    builds the checkpoint (Lightning calls the save hooks on all), so all take part."""
    if trainer.world_size == 1 or not torch.distributed.is_initialized():
        return [value]
    values = [None] * trainer.world_size
    torch.distributed.all_gather_object(values, value)
    return values


class RandomStateCheckpoint(pl.Callback):
    """Puts every rank's random state into each checkpoint; restores this rank's when a resumed
    run trains its first batch."""

    def __init__(self) -> None:
        self.pending: dict | None = None  # a resumed run's state, until its first training batch

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict
    ) -> None:
        checkpoint[CHECKPOINT_KEY] = per_rank(trainer, collect())

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict
    ) -> None:
        if trainer.state.fn != TrainerFn.FITTING:  # testing a checkpoint draws nothing
            return
        path = str(trainer.ckpt_path)
        self.pending = saved_states(checkpoint, path, trainer.world_size)[trainer.global_rank]

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args):
        if self.pending is not None:
            restore(self.pending)
            self.pending = None
