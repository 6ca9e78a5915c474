"""Tiny classifiers whose faithful explanation is known, for the faithfulness tests.

Shapes: B bags, T items, D = 4 features per item. Feature 0 marks an item for the scorer,
feature 1 is the evidence the head reads, features 2.. are noise nothing reads.
"""

import torch
from torch import nn

from attnexp.models.output import ModelOutput
from attnexp.modules import AttentionPooling, Scorer

D = 4


class MarkerScorer(Scorer):
    """Scores an item by its feature 0 times `sharpness` (0: every item alike, uniform weights)."""

    needs_query = False

    def __init__(self, sharpness: float) -> None:
        super().__init__(D, 0)
        self.sharpness = sharpness

    def forward(self, keys: torch.Tensor, query: torch.Tensor | None = None) -> torch.Tensor:
        return self.sharpness * keys[..., 0]  # (B, T)


class PooledBagModel(nn.Module):
    """Attention pooling by `MarkerScorer`, then logits (x1, -x1) of the pooled feature 1: with a
    sharp scorer it reads the marked item only."""

    input_kind = "bags"

    def __init__(self, sharpness: float) -> None:
        super().__init__()
        self.pool = AttentionPooling(D, MarkerScorer(sharpness), query="none")

    def forward(
        self, items: torch.Tensor, mask: torch.Tensor, return_attention: bool = False
    ) -> ModelOutput:
        pooled, weights = self.pool(items, mask)  # (B, D), (B, T)
        logits = torch.stack([pooled[:, 1], -pooled[:, 1]], dim=1)  # (B, 2)
        return ModelOutput(logits, weights if return_attention else None)


def marked_bags(
    batch: int = 6, size: int = 5, seed: int = 0
) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """(inputs, labels, marked position): one marked item per bag, at a random position, whose
    evidence (+-3) decides the class against each other item's weaker opposite evidence (which
    together outweighs it: weighted alike, the items give the other class)."""
    g = torch.Generator().manual_seed(seed)
    items = torch.randn(batch, size, D, generator=g)
    items[..., 0] = 0.0
    sign = torch.where(torch.rand(batch, generator=g) < 0.5, -1.0, 1.0)  # (B,)
    marked = torch.randint(0, size, (batch,), generator=g)
    items[..., 1] = -sign[:, None] * (0.8 + torch.rand(batch, size, generator=g))
    rows = torch.arange(batch)
    items[rows, marked, 0] = 1.0
    items[rows, marked, 1] = 3.0 * sign
    labels = (sign < 0).long()  # class 0: x1 > 0
    mask = torch.ones(batch, size, dtype=torch.bool)
    return {"items": items, "mask": mask}, labels, marked
