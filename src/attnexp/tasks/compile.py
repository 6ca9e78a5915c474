"""`trainer.compile`: torch.compile of the task's network, opt-in (null: eager, as before).

A step of these models is a few hundred small kernels; on a GPU the Python and launch cost of
each, not the arithmetic, sets the step time. `reduce-overhead` compiles the network with CUDA
graphs (the whole forward and backward replayed as one launch each); `default` and
`max-autotune` as torch.compile names them. The network (`task.model`) is compiled, not the
task: its metrics and logging stay eager. It is compiled in place (`nn.Module.compile`), so its
state dict keeps its keys and checkpoints load into an eager network and back. A batch of a new
shape (another padded length) compiles once more, so runs with few distinct shapes gain most.
"""

import pytorch_lightning as pl
from omegaconf import DictConfig

from attnexp.errors import ConfigError

SETTING = "compile"  # trainer.compile: read here, not passed on to Lightning's Trainer
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compile_mode(trainer_cfg: DictConfig) -> str | None:
    """trainer.compile, checked: null or one of MODES."""
    mode = trainer_cfg.get(SETTING)
    if mode is not None and mode not in MODES:
        raise ConfigError(
            f"trainer.compile={mode!r} is not one of null, {', '.join(MODES)} (set "
            f"trainer.compile=...; null runs the network eagerly)"
        )
    return mode


def compile_callbacks(trainer_cfg: DictConfig) -> list[pl.Callback]:
    """[CompileNetwork(mode)] when trainer.compile is set, else []."""
    mode = compile_mode(trainer_cfg)
    return [] if mode is None else [CompileNetwork(mode)]


class CompileNetwork(pl.Callback):
    """Compiles `pl_module.model` once, when the Trainer sets up (on its device by then)."""

    def __init__(self, mode: str = "default") -> None:
        self.mode = mode
        self.compiled: set[int] = set()  # id() of each network compiled: fit, then test

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        network = pl_module.model
        if id(network) not in self.compiled:
            network.compile(mode=self.mode)
            self.compiled.add(id(network))
