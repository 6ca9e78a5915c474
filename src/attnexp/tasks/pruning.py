"""Optuna pruning from inside a run: each validation reports its metric to the run's trial, and a
trial the study's pruner stops ends its training (not as a failure: its record says `pruned`)."""

import logging
import math
from typing import Any

import pytorch_lightning as pl

from attnexp.errors import ConfigError

log = logging.getLogger(__name__)


class TrialPruning(pl.Callback):
    """Reports `monitor` after each validation to trial `number` of study `study_name` in
    `storage`, at the global step, and stops training when `pruner` prunes it.

    The decision is made on rank zero and sent to every rank, so all of them stop together. A
    pruned run records `pruned` ({step, value}) in `record`; the run then ends without its test.
    The storage is opened on first use, in the process that trains (ddp_spawn pickles this).

    Args:
        record: the run record (anything with `update(**fields)` and `data`).
    """

    def __init__(
        self, storage: str, study_name: str, number: int, monitor: str, pruner: Any, record
    ) -> None:
        self.storage, self.study_name, self.number = storage, study_name, number
        self.monitor, self.pruner, self.record = monitor, pruner, record
        self._trial = None

    def trial(self):  # optuna.Trial
        if self._trial is None:
            import optuna

            storage = optuna.storages.get_storage(self.storage)
            pruner = self.pruner if self.pruner is not None else optuna.pruners.NopPruner()
            study = optuna.load_study(study_name=self.study_name, storage=storage, pruner=pruner)
            study_id = storage.get_study_id_from_name(self.study_name)
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, self.number)
            self._trial = optuna.trial.Trial(study, trial_id)
        return self._trial

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_trial": None}

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        prune = False
        if trainer.is_global_zero:
            prune = self._report(trainer)
        if trainer.strategy.broadcast(prune):
            trainer.should_stop = True

    def _report(self, trainer: pl.Trainer) -> bool:
        metric = trainer.callback_metrics.get(self.monitor)
        if metric is None:
            raise ConfigError(
                f"hydra.sweeper.monitor={self.monitor} is not a metric the run logs at "
                f"validation (it logs {', '.join(sorted(trainer.callback_metrics)) or 'none'}; "
                f"set hydra.sweeper.monitor=...)"
            )
        value, step = float(metric), trainer.global_step
        if math.isnan(value):
            return False  # FiniteLosses ends a run whose loss turned NaN
        trial = self.trial()
        trial.report(value, step)
        if not trial.should_prune():
            return False
        log.warning(
            "optuna: trial %d pruned at step %d (%s=%.4f)", self.number, step, self.monitor, value
        )
        self.record.update(pruned={"step": step, self.monitor: value})
        return True
