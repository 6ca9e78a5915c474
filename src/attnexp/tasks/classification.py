"""One LightningModule for every classification experiment (bags, reviews, question pairs).

A batch is a dict: `labels` (B,) plus the model's keyword inputs. The model returns logits, or
(logits, attention) when called with `return_attention=True`.
"""

from collections.abc import Callable

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from attnexp.tasks.optim import param_groups


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
        self.model = model
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.weight_decay = weight_decay
        self.test_set_names = list(test_set_names)
        # validate_args=False: cross_entropy already rejects out-of-range labels, and torchmetrics'
        # per-update input checks cost more than the update itself on CPU.
        metrics = MetricCollection(
            {
                "acc": MulticlassAccuracy(num_classes, average="micro", validate_args=False),
                "f1": MulticlassF1Score(num_classes, average="macro", validate_args=False),
            }
        )
        # Attributes, not a ModuleDict: "train" would clash with nn.Module.train.
        self.train_metrics = metrics.clone(prefix="train/")
        self.val_metrics = metrics.clone(prefix="val/")
        self.test_metrics = metrics.clone(prefix="test/")
        self.extra_test_metrics = nn.ModuleList(
            MulticlassAccuracy(num_classes, average="micro", validate_args=False)
            for _ in self.test_set_names
        )
        self.train_loss = MeanMetric()  # the epoch mean of train/loss, weighted by batch size

    def forward(self, **inputs: torch.Tensor) -> torch.Tensor:
        return self.model(**inputs)

    def _shared_step(
        self, batch: dict, stage: str, batch_idx: int, dataloader_idx: int = 0
    ) -> torch.Tensor:
        inputs, labels = split_batch(batch)
        # Metric objects are updated every step but handed to self.log once per epoch (batch 0):
        # Lightning computes them from their accumulated state at epoch end, and each self.log of
        # a Metric costs a deep .to() over its attributes (~20% of a bag-MNIST training step).
        log_metric = batch_idx == 0
        logits = self.model(**inputs)
        loss = F.cross_entropy(logits, labels)
        batch_size = labels.shape[0]
        if dataloader_idx == 0:
            metrics = getattr(self, f"{stage}_metrics")
            metrics.update(logits, labels)
            if stage == "train":  # the same tags as on_step + on_epoch logging, at a lower cost
                self.train_loss.update(loss.detach(), batch_size)
                if log_metric:
                    self.log("train/loss_epoch", self.train_loss, on_step=False, on_epoch=True)
                # Only on the steps the logger writes (every trainer.log_every_n_steps).
                connector = getattr(self._trainer, "_logger_connector", None)
                if connector is None or connector.should_update_logs:
                    self.log(
                        "train/loss_step",
                        loss,
                        on_step=True,
                        on_epoch=False,
                        prog_bar=True,
                        batch_size=batch_size,
                    )
            else:  # sync_dist: under DDP the mean over all ranks (metrics sync themselves)
                self.log(
                    f"{stage}/loss",
                    loss,
                    on_epoch=True,
                    prog_bar=True,
                    batch_size=batch_size,
                    add_dataloader_idx=False,
                    sync_dist=True,
                )
            if log_metric:
                self.log_dict(
                    metrics,
                    on_step=False,
                    on_epoch=True,
                    prog_bar=stage != "train",
                    batch_size=batch_size,
                    add_dataloader_idx=False,
                )
        else:  # an extra test set: accuracy only, under its own name
            name = self.test_set_names[dataloader_idx - 1]
            metric = self.extra_test_metrics[dataloader_idx - 1]
            metric.update(logits, labels)
            if log_metric:
                self.log(
                    f"test/acc_{name}",
                    metric,
                    on_step=False,
                    on_epoch=True,
                    batch_size=batch_size,
                    add_dataloader_idx=False,
                )
        return loss

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        return self._shared_step(batch, "train", batch_idx)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._shared_step(batch, "val", batch_idx)

    def test_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._shared_step(batch, "test", batch_idx, dataloader_idx)

    def configure_optimizers(self):
        optimizer = self.optimizer_factory(param_groups(self.model, self.weight_decay))
        if self.scheduler_factory is None:
            return optimizer
        scheduler = self.scheduler_factory(
            optimizer, num_training_steps=int(self.trainer.estimated_stepping_batches)
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }
