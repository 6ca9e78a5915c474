"""Preemption: the signal a scheduler sends before it stops a job (submitit's SIGUSR2, or the
signal named by SUBMITIT_PREEMPT_SIGNAL; SIGUSR1 from a plain `sbatch --signal=USR1@<s>`).

While a run trains, the signal only marks the run as preempted; `StopOnPreemption` then saves
`checkpoints/last.ckpt` at the next batch end and stops training with `Preempted` at the next
batch start, or at the end of training (every rank at the same batch). Not at an epoch's end:
the epoch's row of the record is written at the next epoch's start. The train flow records the
run as preempted and hands the signal to the handler that was there before (submitit's, which
requeues the job and exits); the requeued job continues the run from that checkpoint
(runs/requeue.py).

Why not at once, inside the handler (as Lightning's own SLURM auto-requeue does): a signal lands
anywhere in a step, and a checkpoint taken there holds half an optimizer step. Between a batch's
end and the next batch's start the state is one Lightning resumes exactly: either the checkpoint
saved at the batch end, or, when a validation runs in between, the one the run's last-checkpoint
callback saves at its end (a resumed run would skip that validation otherwise).
"""

import logging
import multiprocessing
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import pytorch_lightning as pl
from pytorch_lightning.strategies.launchers import _MultiProcessingLauncher

from attnexp.errors import ConfigError

log = logging.getLogger(__name__)

PREEMPT_SIGNAL_ENV = "SUBMITIT_PREEMPT_SIGNAL"  # submitit's setting; USR2 when unset


def preemption_signals() -> tuple[signal.Signals, ...]:
    """The signals that mean "this job is about to be stopped": submitit's and SIGUSR1."""
    name = os.environ.get(PREEMPT_SIGNAL_ENV) or "USR2"
    chosen = getattr(signal, f"SIG{name}", None)
    if not isinstance(chosen, signal.Signals):
        raise ConfigError(
            f"{PREEMPT_SIGNAL_ENV}={name} names no signal (export {PREEMPT_SIGNAL_ENV}=USR2, the "
            f"default, or another signal's name without SIG)"
        )
    return tuple(dict.fromkeys((chosen, signal.SIGUSR1)))


class Preempted(Exception):
    """Training stopped on a preemption signal, its state saved in `checkpoints/last.ckpt`."""

    def __init__(self, signum: int, handler: object) -> None:
        super().__init__(
            f"stopped on {signal.Signals(signum).name}, the scheduler's preemption signal, with "
            f"its state saved in checkpoints/last.ckpt; the job requeued continues it"
        )
        self.signum = signum
        self.handler = handler  # what handled the signal before training caught it

    def hand_over(self) -> None:
        """Let the scheduler requeue the job: submitit's handler (dumps the job again, requeues
        it and exits); where there was none (plain sbatch), `scontrol requeue` on rank 0. Then
        the process ends with the signal's status."""
        if callable(self.handler):
            self.handler(self.signum, None)  # submitit's: exits, unless this is a rank > 0
        elif os.environ.get("SLURM_JOB_ID") and os.environ.get("SLURM_PROCID", "0") == "0":
            job = os.environ["SLURM_JOB_ID"]
            done = subprocess.run(["scontrol", "requeue", job], check=False, capture_output=True)
            if done.returncode != 0:
                log.error("scontrol requeue %s failed: %s", job, done.stderr.decode().strip())
        raise SystemExit(128 + self.signum)


class StopOnPreemption(pl.Callback):
    """Saves the run's last checkpoint and stops training once a preemption signal came (see the
    module's docstring). `last_ckpt`: the file resume= continues from."""

    def __init__(self, last_ckpt: str | Path) -> None:
        self.last_ckpt = Path(last_ckpt)
        self.received: int | None = None  # the signal, in this process
        self.previous: dict[int, object] = {}  # the handlers training displaced
        self.saved = False  # the checkpoint is written: stop at the next batch start

    def __getstate__(self) -> dict:
        # ddp_spawn's workers get a copy; signals reach the main process only (which stays here)
        return {**self.__dict__, "previous": {}}

    def _note(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            log.warning(
                "%s: preempted; saving the run's state at the next batch end",
                signal.Signals(signum).name,
            )
        self.received = signum

    def _stop_spawned(self, signum: int, frame: FrameType | None) -> None:
        log.warning(
            "%s: preempted; under ddp_spawn the ranks train in processes of their own, which "
            "stop at once: the job continues from the run's last checkpoint (its last "
            "validation's)",
            signal.Signals(signum).name,
        )
        # Lightning leaves spawned ranks running when fit ends in an exception: they would go
        # on writing the run (its record, its checkpoints) while the requeued job starts. Their
        # checkpoints and record are written whole or not at all, so a kill leaves either.
        for rank in multiprocessing.active_children():
            rank.kill()
            rank.join()
        raise Preempted(signum, self.previous.get(signum, signal.SIG_DFL))

    @contextmanager
    def catching(self, trainer: pl.Trainer) -> Iterator[None]:
        """Inside the block (the fit), the preemption signals mark the run instead of reaching
        the handlers installed before; those are back after it. Under ddp_spawn the signal
        reaches this process, not the ranks: training stops at once (Lightning ends the ranks)."""
        spawned = isinstance(trainer.strategy.launcher, _MultiProcessingLauncher)
        handler = self._stop_spawned if spawned else self._note
        for signum in preemption_signals():
            self.previous[signum] = signal.signal(signum, handler)
        try:
            yield
        finally:
            for signum, handler in self.previous.items():
                signal.signal(signum, handler)

    def on_train_batch_end(self, trainer: pl.Trainer, *args: object) -> None:
        if self.saved:
            return
        # every rank decides alike (a rank stopping alone would leave the others waiting)
        if trainer.strategy.reduce_boolean_decision(self.received is not None, all=False):
            trainer.save_checkpoint(self.last_ckpt, weights_only=False)
            self.saved = True

    def _stop(self) -> None:
        if self.saved:
            signum = self.received or preemption_signals()[0]  # a rank that was not signalled
            raise Preempted(signum, self.previous.get(signum, signal.SIG_DFL))

    def on_train_batch_start(self, *args: object) -> None:
        self._stop()

    def on_train_end(self, *args: object) -> None:
        self._stop()
