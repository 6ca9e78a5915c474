"""Bags of digits: attention figures only (no raw inputs to predict on)."""

from pathlib import Path
from typing import Any

import torch
from matplotlib.figure import Figure


class BagPredictor:
    """Draws which digits of the probe bags the model attended to."""

    raw_fields: tuple[str, ...] = ()  # predict reads no raw bags

    def __init__(self, datamodule: Any) -> None:
        self.data = datamodule

    def attention_figure(
        self, batch: dict[str, torch.Tensor], logits: torch.Tensor, attention: Any
    ) -> Figure | None:
        """batch: the probe bags ("items" (B, T, 1, S, S), "mask", "labels"); attention (B, T)
        or None."""
        from attnexp.viz.bags import plot_bag_attention

        return plot_bag_attention(  # without attention: the digits alone
            batch["items"][:, :, 0], batch["mask"], attention, batch["labels"], logits.argmax(-1)
        )

    def prediction_figures(self, *args: Any, **kwargs: Any) -> list[Path]:
        return []

    def probe_texts(self, batch: dict[str, torch.Tensor], task: Any) -> dict[str, str]:
        return {}  # the figures say what the model made of the probes
