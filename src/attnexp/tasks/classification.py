"""One LightningModule for every classification experiment (bags, reviews, question pairs).

A batch is a dict: `labels` (B,) plus the model's keyword inputs. The model returns a
`ModelOutput` (logits, and attention when called with `return_attention=True`).
"""

from collections.abc import Callable

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MetricCollection

from attnexp.errors import ConfigError
from attnexp.models.output import ModelOutput
from attnexp.tasks.metrics import ClassificationStats
from attnexp.tasks.optim import Optimized


def split_batch(batch: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    return inputs, batch["labels"]


class ClassificationTask(Optimized, pl.LightningModule):
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
        stats = MetricCollection({"stats": ClassificationStats(num_classes)}, compute_groups=False)
        self.train_metrics = stats.clone(prefix="train/")
        # In the checkpoint: a run resumed from a mid-epoch checkpoint ends that epoch with the
        # train/* an uninterrupted run has, not those of the batches after the interruption.
        self.train_metrics.persistent(True)
        self._train_metrics_epoch: int | None = None  # the epoch whose batches they hold
        self.val_metrics = stats.clone(prefix="val/")
        # Dataloader 0 is the main test set; the extra ones log their accuracy as acc_<name>.
        self.test_metrics = nn.ModuleList(
            stats.clone(prefix="test/", postfix=f"_{name}" if name else "")
            for name in ["", *self.test_set_names]
        )
        # What a run should know about its numbers (train/evaluate keep them in the record).
        self.notes: list[str] = []
        self.results: dict = {}  # what the run records beside its metrics (none for a classifier)

    def forward(self, **inputs: torch.Tensor) -> ModelOutput:
        return self.model(**inputs)

    def _metrics(self, stage: str, dataloader_idx: int = 0) -> MetricCollection:
        return (
            self.test_metrics[dataloader_idx]
            if stage == "test"
            else getattr(self, f"{stage}_metrics")
        )

    def _shared_step(self, batch: dict, stage: str, dataloader_idx: int = 0) -> torch.Tensor:
        inputs, labels = split_batch(batch)
        logits = self.model(**inputs).logits
        loss = F.cross_entropy(logits, labels)
        self._metrics(stage, dataloader_idx).update(logits.detach(), labels, loss)
        if stage == "train":
            self.log("train/loss_step", loss, prog_bar=True, batch_size=labels.shape[0])
        return loss

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        if self._train_metrics_epoch != self.current_epoch:
            # A new epoch's train/* start empty. on_train_epoch_end has emptied them, except
            # after a resume from a checkpoint written at an epoch's last validation: Lightning
            # then counts that epoch as done without calling on_train_epoch_end.
            self.train_metrics.reset()
            self._train_metrics_epoch = self.current_epoch
        return self._shared_step(batch, "train")

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        # The train metrics in a checkpoint hold batches of the epoch it was written in.
        self._train_metrics_epoch = checkpoint.get("epoch")

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._shared_step(batch, "val")

    def test_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._shared_step(batch, "test", dataloader_idx)

    def on_train_epoch_end(self) -> None:
        # The per-step loss is train/loss_step; the epoch's mean is train/loss_epoch.
        self._log_epoch(self.train_metrics, "train", {"train/loss": "train/loss_epoch"})

    def on_validation_epoch_end(self) -> None:
        self._log_epoch(self.val_metrics, "val")

    def on_test_epoch_end(self) -> None:
        self._log_epoch(self.test_metrics[0], "test")
        for name, metrics in zip(self.test_set_names, self.test_metrics[1:], strict=True):
            self._log_epoch(metrics, "test", only=(f"test/acc_{name}",))

    def _log_epoch(
        self,
        metrics: MetricCollection,
        stage: str,
        rename: dict[str, str] | None = None,
        only: tuple[str, ...] | None = None,
    ) -> None:
        """Log `<stage>/<acc|f1|loss>` from the epoch's stats (summed over all DDP processes by
        compute()), then reset them for the next epoch. Stats that saw no batch log nothing."""
        stats = metrics["stats"]
        if stats.update_count == 0:
            return
        rename = rename or {}
        values = {
            rename.get(k, k): v for k, v in metrics.compute().items() if only is None or k in only
        }
        if stage in ("val", "test"):
            self._note_one_class(stage, stats, [k for k in values if "/loss" not in k])
        metrics.reset()
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
