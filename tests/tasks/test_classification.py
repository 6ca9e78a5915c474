import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader

from attnexp.tasks import ClassificationTask


class Linear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def test_epoch_metrics_cover_every_batch():
    """Metrics are logged once per epoch but computed over all batches of every test set."""
    torch.manual_seed(0)
    batches = [{"x": torch.randn(5, 4), "labels": torch.randint(0, 3, (5,))} for _ in range(4)]
    model = Linear()
    task = ClassificationTask(model, 3, torch.optim.Adam, test_set_names=["again"])
    trainer = pl.Trainer(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    loaders = [DataLoader(batches, batch_size=None), DataLoader(batches[:2], batch_size=None)]
    (main, extra) = trainer.test(task, dataloaders=loaders, verbose=False)
    with torch.no_grad():
        correct = [(model(b["x"]).argmax(-1) == b["labels"]).float() for b in batches]
    assert abs(main["test/acc"] - torch.cat(correct).mean().item()) < 1e-6
    assert abs(extra["test/acc_again"] - torch.cat(correct[:2]).mean().item()) < 1e-6
