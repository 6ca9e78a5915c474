"""Gradient clipping under mixed precision (16-mixed or bf16-mixed): Lightning clips the gradients
itself and refuses an optimizer that unscales inside its step, as a fused Adam does, so Adam is
not fused then."""

import functools
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader

from attnexp.models.output import ModelOutput
from attnexp.tasks import ClassificationTask
from attnexp.tasks.optim import clips_in_amp, fused_setting


def cpu_trainer(precision: str, clip: float | None) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu", precision=precision, gradient_clip_val=clip, logger=False,
        enable_checkpointing=False, enable_progress_bar=False,
    )  # fmt: skip


def lightning_refuses_fused(trainer: pl.Trainer) -> bool:
    """Whether Lightning's precision plugin of `trainer` refuses to clip for a fused Adam."""
    layer = nn.Linear(2, 2)
    layer(torch.randn(1, 2)).sum().backward()
    fused = torch.optim.Adam(layer.parameters(), fused=True)  # torch fuses on the CPU too
    try:
        trainer.precision_plugin.clip_gradients(fused, trainer.gradient_clip_val or 0.0)
    except RuntimeError as err:
        assert "fused" in str(err)
        return True
    return False


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "bf16-true"])
@pytest.mark.parametrize("clip", [None, 1.0])
def test_the_check_says_what_lightning_refuses(precision, clip):
    trainer = cpu_trainer(precision, clip)
    assert clips_in_amp(trainer) is lightning_refuses_fused(trainer)
    assert clips_in_amp(trainer) is (precision == "bf16-mixed" and clip is not None)


def test_no_trainer_yet_is_no_clipping():
    assert not clips_in_amp(None)


def test_adam_on_cuda_is_not_fused_when_clipped_in_amp():
    on_cuda = SimpleNamespace(is_cuda=True, is_floating_point=lambda: True)  # a parameter's view
    groups = [{"params": [on_cuda]}]
    adam = functools.partial(torch.optim.Adam, lr=1e-3)
    assert fused_setting(adam, groups) == {"fused": True}
    assert fused_setting(adam, groups, clipped_in_amp=True) == {}


class Linear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> ModelOutput:
        return ModelOutput(self.layer(x))


def fit_three_steps(accelerator: str, precision: str, clip: float | None) -> pl.Trainer:
    torch.manual_seed(0)
    batches = [{"x": torch.randn(8, 4), "labels": torch.randint(0, 2, (8,))} for _ in range(3)]
    task = ClassificationTask(Linear(), 2, functools.partial(torch.optim.Adam, lr=1e-3))
    trainer = pl.Trainer(
        accelerator=accelerator, devices=1, precision=precision, gradient_clip_val=clip,
        max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
    )  # fmt: skip
    trainer.fit(task, train_dataloaders=DataLoader(batches, batch_size=None))
    assert trainer.global_step == 3
    return trainer


def test_bf16_mixed_training_with_clipping_on_the_cpu():
    fit_three_steps("cpu", "bf16-mixed", 1.0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")
@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed"])
@pytest.mark.parametrize("clip", [None, 1.0])
def test_mixed_precision_training_with_and_without_clipping_on_cuda(precision, clip):
    trainer = fit_three_steps("gpu", precision, clip)
    (optimizer,) = trainer.optimizers
    assert bool(optimizer.defaults["fused"]) is (clip is None)
