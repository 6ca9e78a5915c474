"""Optimiser parameter groups and learning-rate schedules."""

import math
from collections.abc import Callable

import torch
from pytorch_lightning.plugins.precision import MixedPrecision
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from attnexp.errors import ConfigError

DECAYS = ("linear", "cosine")
# Optimizers with a fused CUDA kernel: one launch per step for all parameters, where the default
# (foreach) launches a few per parameter group and dtype.
FUSABLE = (torch.optim.Adam, torch.optim.AdamW)


def fused_setting(optimizer_factory, groups: list[dict], clipped_in_amp: bool = False) -> dict:
    """{"fused": True} for Adam/AdamW over parameters all on CUDA, unless the config chose
    (optimizer.fused=false, or a foreach setting) or `clipped_in_amp` (`clips_in_amp`); else {}
    (torch's own default)."""
    target = getattr(optimizer_factory, "func", optimizer_factory)
    chosen = getattr(optimizer_factory, "keywords", {})
    if clipped_in_amp or not (isinstance(target, type) and issubclass(target, FUSABLE)):
        return {}
    if chosen.get("fused") is not None or chosen.get("foreach") is not None:
        return {}
    params = [p for group in groups for p in group["params"]]
    if params and all(p.is_cuda and p.is_floating_point() for p in params):
        return {"fused": True}
    return {}


def clips_in_amp(trainer) -> bool:
    """Whether `trainer` clips gradients (trainer.gradient_clip_val) under automatic mixed
    precision (16-mixed or bf16-mixed): Lightning's MixedPrecision plugin then refuses an
    optimizer that unscales inside its step, as a fused one does, with or without a GradScaler.
    None: no trainer yet."""
    if trainer is None or not trainer.gradient_clip_val:
        return False
    return isinstance(trainer.precision_plugin, MixedPrecision)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices only: biases, norms and other vectors (ndim < 2) get no weight decay.

    Without weight decay this is one group: each group is one more pass of the optimizer's
    per-step loop (measurable on small models, see bench/bench_bag_mnist.py).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    if weight_decay == 0:
        return [{"params": params, "weight_decay": 0.0}]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def linear_warmup_decay(
    optimizer: torch.optim.Optimizer,
    num_training_steps: int,
    warmup_ratio: float = 0.1,
    decay: str = "linear",
) -> LambdaLR:
    """Linear warmup over `warmup_ratio` of the steps, then linear or cosine decay to 0."""
    if decay not in DECAYS:
        raise ConfigError(
            f"scheduler.decay '{decay}' is not one of {', '.join(DECAYS)} (set scheduler.decay=...)"
        )
    if type(warmup_ratio) not in (int, float) or not 0 <= warmup_ratio <= 1:
        raise ConfigError(
            f"scheduler.warmup_ratio={warmup_ratio!r} must be a share of the training steps from "
            f"0 to 1 (set scheduler.warmup_ratio=0.1, ...)"
        )
    warmup = max(1, int(num_training_steps * warmup_ratio))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, num_training_steps - warmup))
        return 1.0 - progress if decay == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)


def build_optimizer(
    optimizer_factory, model, weight_decay: float, trainer=None
) -> torch.optim.Optimizer:
    """`optimizer_factory` over `param_groups(model, weight_decay)` (fused on CUDA unless the
    config chose or the `trainer` clips under mixed precision), with torch's refusal of its own
    arguments said as the setting to change."""
    groups = param_groups(model, weight_decay)
    fused = fused_setting(optimizer_factory, groups, clips_in_amp(trainer))
    try:
        return optimizer_factory(groups, **fused)
    except (TypeError, ValueError) as err:  # torch's checks of its own arguments
        target = getattr(optimizer_factory, "func", optimizer_factory)
        raise ConfigError(
            f"optimizer: {getattr(target, '__name__', target)} refuses its settings: {err} "
            f"(set optimizer.<that setting>=...)"
        ) from err


def with_schedule(
    optimizer: torch.optim.Optimizer, scheduler_factory, total_steps: Callable[[], int]
):
    """What a task's configure_optimizers returns: the optimizer, and its schedule stepped every
    optimizer step when one is configured, over `total_steps()` (asked for only then: it needs
    the Trainer)."""
    if scheduler_factory is None:
        return optimizer
    scheduler = scheduler_factory(optimizer, num_training_steps=int(total_steps()))
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class Optimized:
    """A task's `build_optimizer` and `configure_optimizers`, for a LightningModule that keeps
    `optimizer_factory`, `scheduler_factory`, `model` and `weight_decay` (listed before
    pl.LightningModule among its bases)."""

    def build_optimizer(self) -> torch.optim.Optimizer:
        """The optimizer over `param_groups`: also what a resumed run's saved optimizer state is
        tried on before fit (train.check_resume_fits)."""
        try:
            trainer = self.trainer
        except RuntimeError:  # not attached: the optimizer a resumed run's state is tried on
            trainer = None
        return build_optimizer(self.optimizer_factory, self.model, self.weight_decay, trainer)

    def configure_optimizers(self):
        return with_schedule(
            self.build_optimizer(),
            self.scheduler_factory,
            lambda: self.trainer.estimated_stepping_batches,
        )
