"""One LightningModule for every classification experiment (bags, reviews, question pairs).

A batch is a dict: `labels` (B,) plus the model's keyword inputs. The model returns logits, or
(logits, attention) when called with `return_attention=True`.
"""

import inspect
from collections.abc import Callable

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn

from attnexp.errors import ConfigError
from attnexp.tasks.metrics import ClassificationStats
from attnexp.tasks.optim import fused_setting, param_groups


def split_batch(batch: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    return inputs, batch["labels"]


class ClassificationTask(pl.LightningModule):
    """Cross-entropy training with accuracy (and macro F1) per stage.

    Args:
        model: the network.
        num_classes: from the DataModule.
        optimizer: factory `optimizer(param_groups)`, e.g. a partial torch.optim.Adam.
        scheduler: optional factory `scheduler(optimizer, num_training_steps=...)`, stepped per step.
        weight_decay: applied to matrices only (see `param_groups`).
        test_set_names: names of the extra test sets after the main one (dataloader 1, 2, ...):
            their accuracy is logged as `test/acc_<name>`.
    """

    def __init__(
        self,
        model: nn.Module,
        num_classes: int,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., object] | None = None,
        weight_decay: float = 0.0,
        test_set_names: list[str] | tuple[str, ...] = (),
    ) -> None:
        super().__init__()
        if getattr(optimizer, "keywords", {}).get("weight_decay"):
            raise ConfigError(
                f"optimizer.weight_decay={optimizer.keywords['weight_decay']} would be overridden "
                f"by the parameter groups, which take their decay from task.weight_decay (matrices "
                f"only): set task.weight_decay={optimizer.keywords['weight_decay']} instead"
            )
        if type(weight_decay) not in (int, float) or weight_decay < 0:
            raise ConfigError(
                f"task.weight_decay={weight_decay!r} must be a number >= 0 (torch would apply a "
                f"negative one, pushing weights away from 0; set task.weight_decay=...)"
            )
        self.model = model
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.weight_decay = weight_decay
        self.test_set_names = list(test_set_names)
        # One confusion matrix (+ loss sum) per stage and test set: a cheap update every step,
        # accuracy / macro F1 / mean loss derived and logged once per epoch (see metrics.py).
        self.train_stats = ClassificationStats(num_classes)
        self.val_stats = ClassificationStats(num_classes)
        self.test_stats = nn.ModuleList(
            ClassificationStats(num_classes) for _ in range(1 + len(self.test_set_names))
        )
        # What a run should know about its numbers (train/evaluate keep them in the record).
        self.notes: list[str] = []

    def __setattr__(self, name: str, value: object) -> None:
        # Lightning sets `_current_fx_name` (a hook's name, or None) before and after every hook
        # it calls: ~44 times per training step. nn.Module.__setattr__ first checks a value against
        # parameters, buffers and submodules (~2 us a call); a str or None always ends up a plain
        # attribute, so it is set as one directly: ~0.09 ms less per step (bench_overhead.py's model).
        if name == "_current_fx_name":
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def forward(self, **inputs: torch.Tensor) -> torch.Tensor:
        return self.model(**inputs)

    def _shared_step(self, batch: dict, stats: ClassificationStats) -> torch.Tensor:
        inputs, labels = split_batch(batch)
        logits = self.model(**inputs)
        loss = F.cross_entropy(logits, labels)
        stats.update(logits.detach(), labels, loss)
        return loss

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = self._shared_step(batch, self.train_stats)
        # Only on the steps the logger writes (every trainer.log_every_n_steps): self.log costs
        # more than the stats update.
        connector = getattr(self._trainer, "_logger_connector", None)
        if connector is None or connector.should_update_logs:
            self.log("train/loss_step", loss, prog_bar=True, batch_size=batch["labels"].shape[0])
        return loss

    # Lightning reads training_step's signature on every step, to learn whether it takes
    # `batch_idx` (inspect.getfullargspec: ~28 us). A function's `__signature__` is returned as it
    # is, so the signature is read once, here: ~5 us a step.
    training_step.__signature__ = inspect.signature(training_step)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._shared_step(batch, self.val_stats)

    def test_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._shared_step(batch, self.test_stats[dataloader_idx])

    def on_train_epoch_end(self) -> None:
        self._log_epoch("train", self.train_stats, {"loss": "loss_epoch"})

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val", self.val_stats)

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test", self.test_stats[0])
        for name, stats in zip(self.test_set_names, self.test_stats[1:], strict=True):
            self._log_epoch("test", stats, {"acc": f"acc_{name}"}, only=("acc",))

    def _log_epoch(
        self,
        stage: str,
        stats: ClassificationStats,
        rename: dict[str, str] | None = None,
        only: tuple[str, ...] | None = None,
    ) -> None:
        """Log `<stage>/<acc|f1|loss>` from the epoch's stats (summed over all DDP processes by
        compute()), then reset them for the next epoch. Stats that saw no batch log nothing."""
        if stats.update_count == 0:
            return
        rename = rename or {}
        values = {
            f"{stage}/{rename.get(k, k)}": v
            for k, v in stats.compute().items()
            if only is None or k in only
        }
        if stage in ("val", "test"):
            self._note_one_class(stage, stats, [k for k in values if "/loss" not in k])
        stats.reset()
        # The values are already global: sync_dist only averages identical numbers (and keeps
        # Lightning from warning about epoch-level logging under DDP).
        self.log_dict(values, prog_bar=stage == "val", sync_dist=True, add_dataloader_idx=False)

    def _note_one_class(self, stage: str, stats: ClassificationStats, names: list[str]) -> None:
        """An evaluation whose labels are all one class (a few first batches of a test set sorted
        by label, e.g. IMDB's with trainer.limit_test_batches) measures that class only: said
        once per stage in `notes` (train and evaluate keep them in the record), not left for the
        user to find in a 0.0 or 1.0."""
        if self._trainer is not None and self._trainer.sanity_checking:
            return  # a couple of batches before training: not what the run measures
        seen = stats.labels_seen()
        if stats.num_classes < 2 or len(seen) != 1:
            return
        note = (
            f"{stage}: every example read for {' and '.join(names)} has label {seen[0]}, so "
            f"{'they measure' if len(names) > 1 else 'it measures'} that class only "
            f"(trainer.limit_{stage}_batches takes the first batches, and the data may be sorted "
            f"by label)"
        )
        if note not in self.notes:
            self.notes.append(note)

    def build_optimizer(self) -> torch.optim.Optimizer:
        """The optimizer over `param_groups`: also what a resumed run's saved optimizer state is
        tried on before fit (train.check_resume_fits)."""
        groups = param_groups(self.model, self.weight_decay)
        try:
            optimizer = self.optimizer_factory(
                groups, **fused_setting(self.optimizer_factory, groups)
            )
        except (TypeError, ValueError) as err:  # torch's checks of its own arguments
            target = getattr(self.optimizer_factory, "func", self.optimizer_factory)
            raise ConfigError(
                f"optimizer: {getattr(target, '__name__', target)} refuses its settings: {err} "
                f"(set optimizer.<that setting>=...)"
            ) from err
        return optimizer

    def configure_optimizers(self):
        optimizer = self.build_optimizer()
        if self.scheduler_factory is None:
            return optimizer
        scheduler = self.scheduler_factory(
            optimizer, num_training_steps=int(self.trainer.estimated_stepping_batches)
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }
