"""precision=16-mixed with trainer.gradient_clip_val: Lightning unscales the gradients itself
before clipping and refuses a fused Adam (which unscales inside its step), so Adam is not fused
then."""

import functools
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader

from attnexp.models.output import ModelOutput
from attnexp.tasks import ClassificationTask
from attnexp.tasks.optim import clips_scaled_gradients, fused_setting


def stand_in(clip: float | None, scaler: object | None) -> SimpleNamespace:
    """What the check reads of a Trainer."""
    return SimpleNamespace(gradient_clip_val=clip, precision_plugin=SimpleNamespace(scaler=scaler))


def test_only_clipping_under_a_grad_scaler_counts():
    assert clips_scaled_gradients(stand_in(1.0, scaler=object()))
    assert not clips_scaled_gradients(stand_in(None, scaler=object()))
    assert not clips_scaled_gradients(stand_in(0.0, scaler=object()))
    assert not clips_scaled_gradients(stand_in(1.0, scaler=None))
    assert not clips_scaled_gradients(None)  # no trainer yet
    bf16 = pl.Trainer(accelerator="cpu", precision="bf16-mixed", gradient_clip_val=1.0)
    assert not clips_scaled_gradients(bf16)  # bf16 needs no scaler


def test_adam_on_cuda_is_not_fused_when_scaled_gradients_are_clipped():
    on_cuda = SimpleNamespace(is_cuda=True, is_floating_point=lambda: True)  # a parameter's view
    groups = [{"params": [on_cuda]}]
    adam = functools.partial(torch.optim.Adam, lr=1e-3)
    assert fused_setting(adam, groups) == {"fused": True}
    assert fused_setting(adam, groups, clips_scaled=True) == {}


class Linear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> ModelOutput:
        return ModelOutput(self.layer(x))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")
@pytest.mark.parametrize("clip", [None, 1.0])
def test_fp16_training_with_and_without_clipping_on_cuda(clip):
    torch.manual_seed(0)
    batches = [{"x": torch.randn(8, 4), "labels": torch.randint(0, 2, (8,))} for _ in range(3)]
    task = ClassificationTask(Linear(), 2, functools.partial(torch.optim.Adam, lr=1e-3))
    trainer = pl.Trainer(
        accelerator="gpu", devices=1, precision="16-mixed", gradient_clip_val=clip, max_steps=3,
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
    )  # fmt: skip
    trainer.fit(task, train_dataloaders=DataLoader(batches, batch_size=None))
    assert trainer.global_step == 3
    (optimizer,) = trainer.optimizers
    assert bool(optimizer.defaults["fused"]) is (clip is None)
