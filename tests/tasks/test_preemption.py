"""The preemption signal: caught during the fit, a checkpoint at the next batch end, a stop at the
next batch start, then the signal handed to the handler there was before."""

import os
import signal

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from attnexp.errors import ConfigError
from attnexp.files import checkpoint_value
from attnexp.tasks.preemption import Preempted, StopOnPreemption, preemption_signals


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self.layer(batch).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class SignalAt(pl.Callback):
    def __init__(self, batch: int) -> None:
        self.batch = batch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if batch_idx + 1 == self.batch:
            os.kill(os.getpid(), signal.SIGUSR2)


def test_preemption_signals(monkeypatch):
    monkeypatch.delenv("SUBMITIT_PREEMPT_SIGNAL", raising=False)
    assert preemption_signals() == (signal.SIGUSR2, signal.SIGUSR1)
    monkeypatch.setenv("SUBMITIT_PREEMPT_SIGNAL", "USR1")
    assert preemption_signals() == (signal.SIGUSR1,)
    monkeypatch.setenv("SUBMITIT_PREEMPT_SIGNAL", "BOGUS")
    with pytest.raises(ConfigError, match="SUBMITIT_PREEMPT_SIGNAL=BOGUS"):
        preemption_signals()


def test_a_signal_saves_at_the_batch_end_and_stops_at_the_next_start(tmp_path, monkeypatch):
    monkeypatch.delenv("SUBMITIT_PREEMPT_SIGNAL", raising=False)
    received = []
    before = signal.signal(signal.SIGUSR2, lambda signum, frame: received.append(signum))
    try:
        stop = StopOnPreemption(tmp_path / "last.ckpt")
        trainer = pl.Trainer(
            max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, callbacks=[SignalAt(3), stop], accelerator="cpu",
        )  # fmt: skip
        with pytest.raises(Preempted) as stopped, stop.catching(trainer):
            trainer.fit(Regression(), DataLoader(torch.randn(40, 3), batch_size=4))
        assert checkpoint_value(tmp_path / "last.ckpt", "global_step") == 3
        assert trainer.global_step == 3  # batch 4 never trained
        assert received == []  # the handler before was kept away from it...
        with pytest.raises(SystemExit) as ended:
            stopped.value.hand_over()
        assert received == [signal.SIGUSR2]  # ...and gets it once training has stopped
        assert ended.value.code == 128 + signal.SIGUSR2
        assert signal.getsignal(signal.SIGUSR2) is not stop._note  # put back after the fit
    finally:
        signal.signal(signal.SIGUSR2, before)


def test_without_a_handler_slurm_requeues_the_job(tmp_path, monkeypatch):
    """A plain sbatch job (--signal=USR1@90, no submitit): scontrol requeue on rank 0."""
    (tmp_path / "scontrol").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/called\n')
    (tmp_path / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_PROCID", "0")
    with pytest.raises(SystemExit):
        Preempted(signal.SIGUSR1, signal.SIG_DFL).hand_over()
    assert (tmp_path / "called").read_text().split() == ["requeue", "77"]
