"""trainer.compile (torch.compile of the network) and the fused Adam(W) on CUDA."""

import functools

import pytest
import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf
from torch import nn
from torch.utils.data import DataLoader

from attnexp.errors import ConfigError
from attnexp.models.output import ModelOutput
from attnexp.runner.trainer import lightning_settings
from attnexp.tasks import ClassificationTask
from attnexp.tasks.compile import CompileNetwork, compile_callbacks
from attnexp.tasks.optim import fused_setting

ON_GPU = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")]


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> ModelOutput:
        return ModelOutput(self.net(x))


class LossHistory(pl.Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


def train(callbacks: list[pl.Callback], accelerator: str = "cpu") -> tuple[list[float], dict]:
    torch.manual_seed(0)
    batches = [{"x": torch.randn(8, 6), "labels": torch.randint(0, 3, (8,))} for _ in range(5)]
    task = ClassificationTask(MLP(), 3, functools.partial(torch.optim.Adam, lr=1e-2))
    history = LossHistory()
    trainer = pl.Trainer(
        max_epochs=2,
        accelerator=accelerator,
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[history, *callbacks],
    )
    trainer.fit(task, DataLoader(batches, batch_size=None))
    return history.losses, task.model.state_dict()


@pytest.mark.slow  # inductor's C++ compile: ~80 s on a busy 2-core machine
def test_compiled_network_trains_as_the_eager_one():
    """Same losses step by step (within float tolerance) and the same state-dict keys: a
    compiled run's checkpoints load into an eager network."""
    eager, eager_state = train([])
    compiled, compiled_state = train([CompileNetwork("default")])
    assert len(compiled) == len(eager) == 10
    torch.testing.assert_close(torch.tensor(compiled), torch.tensor(eager), rtol=1e-4, atol=1e-5)
    assert list(compiled_state) == list(eager_state)
    for key, value in compiled_state.items():
        torch.testing.assert_close(value, eager_state[key], rtol=1e-4, atol=1e-5)


def test_compile_setting_is_checked_and_kept_from_lightning():
    settings = OmegaConf.create({"max_epochs": 1, "compile": "reduce-overhead"})
    assert "compile" not in lightning_settings(settings)
    assert lightning_settings(settings).max_epochs == 1
    (callback,) = compile_callbacks(settings)
    assert callback.mode == "reduce-overhead"
    assert compile_callbacks(OmegaConf.create({"compile": None})) == []
    with pytest.raises(ConfigError, match=r"trainer.compile='fast' is not one of null, default"):
        compile_callbacks(OmegaConf.create({"compile": "fast"}))


def test_fused_only_for_adam_on_cuda_and_unless_the_config_chose():
    cpu_groups = [{"params": [nn.Parameter(torch.zeros(2))]}]
    assert fused_setting(functools.partial(torch.optim.Adam, lr=1e-3), cpu_groups) == {}
    assert fused_setting(functools.partial(torch.optim.SGD, lr=1e-3), cpu_groups) == {}
    assert fused_setting(torch.optim.AdamW, [{"params": []}]) == {}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")
@pytest.mark.parametrize("factory", [torch.optim.Adam, torch.optim.AdamW])
@pytest.mark.parametrize("chosen", [{}, {"fused": False}, {"foreach": True}])
def test_fused_adam_on_cuda(factory, chosen):
    groups = [{"params": [nn.Parameter(torch.zeros(2, device="cuda"))]}]
    expected = {} if chosen else {"fused": True}
    assert fused_setting(functools.partial(factory, lr=1e-3, **chosen), groups) == expected


@pytest.mark.parametrize("mode", [pytest.param(m, marks=ON_GPU) for m in ["reduce-overhead"]])
def test_compiled_network_trains_on_cuda(mode):
    losses, _ = train([CompileNetwork(mode)], accelerator="gpu")
    eager, _ = train([], accelerator="gpu")
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(eager), rtol=1e-3, atol=1e-4)
