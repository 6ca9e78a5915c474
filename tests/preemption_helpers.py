"""A callback that preempts its own run once, for the requeue tests: it sends this process a
signal at the end of a given training batch, in one job of a sweep, the first time only (a
marker file tells the requeued job apart)."""

import os
import signal
from pathlib import Path

import pytorch_lightning as pl
from hydra.core.hydra_config import HydraConfig


class SignalOnce(pl.Callback):
    def __init__(
        self, at_batch: int, only_job: int, marker: str, name: str = "USR2", parent: bool = False
    ):
        """parent: signal the parent process (ddp_spawn's main, from rank 0's worker)."""
        self.at_batch, self.marker, self.parent = at_batch, Path(marker), parent
        self.signum = getattr(signal, f"SIG{name}")
        job = HydraConfig.get().job.num
        self.armed = job == only_job and not self.marker.exists()
        self.batches = 0

    def on_train_batch_end(self, trainer: pl.Trainer, *args: object) -> None:
        self.batches += 1
        if self.armed and self.batches == self.at_batch and trainer.is_global_zero:
            self.armed = False
            self.marker.touch()
            os.kill(os.getppid() if self.parent else os.getpid(), self.signum)
