"""Epoch metrics of a classification stage, accumulated in one confusion matrix.

A training step of a small model (bag-MNIST: ~16 ms on one CPU core) cannot afford the ~0.8 ms
that updating torchmetrics' accuracy + macro F1 collection and a MeanMetric for the loss costs per
step. `ClassificationStats` keeps one (C, C) confusion matrix and a loss sum instead: an update is
one accumulating `index_put_` and two adds, and accuracy, macro F1 and the mean loss are all
derived from the state at epoch end. It is a torchmetrics `Metric`, so under DDP `compute()` sums the states of
every process before deriving anything.
"""

import torch
from torchmetrics import Metric


class ClassificationStats(Metric):
    """Confusion matrix + loss sum over an epoch -> {"acc", "f1", "loss"}.

    `f1` is the macro F1 with torchmetrics' conventions (`MulticlassF1Score(average="macro")`):
    a class's F1 is 0 when its denominator is 0, and classes that never occur in either the labels
    or the predictions are left out of the mean.
    """

    full_state_update = False

    def __init__(self, num_classes: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.num_classes = num_classes
        zeros = torch.zeros(num_classes, num_classes, dtype=torch.long)
        self.add_state("confusion", default=zeros, dist_reduce_fx="sum")  # [label, prediction]
        # float32: MPS has no float64.
        self.add_state("loss_sum", default=torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("loss_count", default=torch.tensor(0), dist_reduce_fx="sum")

    def update(
        self, logits: torch.Tensor, labels: torch.Tensor, loss: torch.Tensor | None = None
    ) -> None:
        """logits (B, C), labels (B,); `loss`: the batch's mean loss (weighted by B)."""
        C = self.num_classes
        cells = labels * C + logits.argmax(dim=-1)
        # In place: `self.x += ...` would go through nn.Module.__setattr__ (a measurable cost).
        # Not torch.bincount: on CUDA it reads the min and max of `cells` back to the host (two
        # device syncs per step, which stall the training loop). An accumulating index_put_
        # stays on the device, is deterministic, and costs no more on CPU.
        self.confusion.view(-1).index_put_((cells,), torch.ones_like(cells), accumulate=True)
        if loss is not None:
            self.loss_sum.add_(loss.detach().float() * labels.shape[0])
            self.loss_count.add_(labels.shape[0])

    def labels_seen(self) -> list[int]:
        """The classes that occurred as labels, over every process (what compute() sums)."""
        with self.sync_context():
            return self.confusion.sum(dim=1).nonzero().flatten().tolist()

    def compute(self) -> dict[str, torch.Tensor]:
        confusion = self.confusion.double()
        tp = confusion.diagonal()
        support, predicted = confusion.sum(dim=1), confusion.sum(dim=0)  # per class
        denominator = support + predicted  # 2 tp + fn + fp
        present = denominator > 0  # classes seen as a label or a prediction
        f1 = 2 * tp[present] / denominator[present]
        result = {
            "acc": tp.sum() / confusion.sum().clamp(min=1),
            "f1": f1.sum() / present.sum().clamp(min=1),
        }
        if self.loss_count > 0:
            result["loss"] = self.loss_sum / self.loss_count
        return {k: v.float() for k, v in result.items()}
