"""Bag-of-digits networks: a bag of T images -> one class (e.g. the largest digit in the bag).

Shapes: B bags, T items per bag (padded), C x S x S images, H hidden features.
"""

from collections.abc import Callable

import torch
from torch import nn

from attnexp.errors import ConfigError
from attnexp.models.output import ModelOutput
from attnexp.modules import AttentionPooling, Scorer, SimpleScorer

BACKBONES = ("mlp", "conv")
ATTENTIONS = ("simple", "context")


def item_backbone(kind: str, image_size: int, channels: int, hidden_size: int) -> nn.Module:
    """Per-item feature extractor: (N, C, S, S) -> (N, H). No BatchNorm: padded items would skew it."""
    if kind == "mlp":
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(channels * image_size * image_size, hidden_size),
            nn.LeakyReLU(),
            nn.Linear(hidden_size, hidden_size),
            nn.LeakyReLU(),
            nn.Linear(hidden_size, hidden_size),
            nn.LeakyReLU(),
        )
    if kind == "conv":
        reduced = image_size // 4  # two 2x2 poolings
        return nn.Sequential(
            nn.Conv2d(channels, 32, 3, padding=1),
            nn.LeakyReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.LeakyReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(64 * reduced * reduced, hidden_size),
            nn.LeakyReLU(),
        )
    raise ValueError(f"backbone='{kind}' is not one of {', '.join(BACKBONES)}")


def classifier_head(hidden_size: int, num_classes: int, pooled_norm: bool) -> nn.Module:
    """The book's prediction nets: its context attention net (`SmarterAttentionNet`) normalises
    the pooled vector first (`pooled_norm`), its simple attention net does not."""
    return nn.Sequential(
        *([nn.BatchNorm1d(hidden_size)] if pooled_norm else []),
        nn.Linear(hidden_size, hidden_size),
        nn.LeakyReLU(),
        nn.BatchNorm1d(hidden_size),
        nn.Linear(hidden_size, num_classes),
    )


class BagMLP(nn.Module):
    """The baseline: the whole bag flattened through an MLP. Needs bags of at most `bag_size`."""

    input_kind = "bags"

    def __init__(
        self,
        num_classes: int,
        bag_size: int,
        image_size: int,
        channels: int = 1,
        hidden_size: int = 256,
    ) -> None:
        super().__init__()
        self.max_bag_size = bag_size
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(bag_size * channels * image_size * image_size, hidden_size),
            nn.LeakyReLU(),
            nn.BatchNorm1d(hidden_size),
            nn.Linear(hidden_size, hidden_size),
            nn.LeakyReLU(),
            nn.BatchNorm1d(hidden_size),
            nn.Linear(hidden_size, hidden_size),
            nn.LeakyReLU(),
            nn.BatchNorm1d(hidden_size),
            nn.Linear(hidden_size, num_classes),
        )

    def forward(
        self, items: torch.Tensor, mask: torch.Tensor, return_attention: bool = False
    ) -> ModelOutput:
        """items (B, T, C, S, S), mask (B, T) -> logits (B, classes); no attention."""
        B, T = mask.shape
        if T > self.max_bag_size:
            raise ConfigError(
                f"bag_mlp was built for bags of at most {self.max_bag_size} items, got {T}"
            )
        items = items * mask[:, :, None, None, None]  # zero the padded slots
        if T < self.max_bag_size:  # smaller bags: the missing slots are empty (zeros)
            pad = items.new_zeros(B, self.max_bag_size - T, *items.shape[2:])
            items = torch.cat([items, pad], dim=1)
        return ModelOutput(self.net(items))


class BagAttention(nn.Module):
    """Backbone per item -> attention pooling over the bag -> classifier.

    Args:
        attention: "simple" (a context-free score network) or "context" (the `scorer` against the
            masked mean of the item features as query).
        scorer: factory for the context scorer, called with key_dim and query_dim (from `scorer=`).
        backbone: "mlp" or "conv".
        pooled_norm: BatchNorm on the pooled vector before the classifier (the book's context
            attention net has it, its simple attention net does not).
    """

    input_kind = "bags"
    max_bag_size = None  # any bag size
    scorer_free_attentions = ("simple",)  # the runner drops scorer= for these

    def __init__(
        self,
        num_classes: int,
        image_size: int,
        channels: int = 1,
        hidden_size: int = 256,
        backbone: str = "mlp",
        attention: str = "context",
        scorer: Callable[..., Scorer] | None = None,
        pooled_norm: bool = False,
    ) -> None:
        super().__init__()
        if attention not in ATTENTIONS:
            raise ValueError(f"attention='{attention}' is not one of {', '.join(ATTENTIONS)}")
        if attention == "context" and scorer is None:
            # The runner refuses this first, listing conf/scorer/ (runner/build.check_config).
            raise ValueError("attention=context needs a scorer")
        self.backbone = item_backbone(backbone, image_size, channels, hidden_size)
        if attention == "simple":
            self.pool = AttentionPooling(hidden_size, SimpleScorer(hidden_size), query="none")
        else:
            self.pool = AttentionPooling(hidden_size, scorer, query="mean")
        self.head = classifier_head(hidden_size, num_classes, pooled_norm)

    def forward(
        self, items: torch.Tensor, mask: torch.Tensor, return_attention: bool = False
    ) -> ModelOutput:
        """items (B, T, C, S, S), mask (B, T) -> logits (B, classes), weights (B, T) if asked."""
        B, T = mask.shape
        features = self.backbone(items.flatten(0, 1)).view(B, T, -1)  # (B, T, H)
        pooled, weights = self.pool(features, mask)  # (B, H), (B, T)
        return ModelOutput(self.head(pooled), weights if return_attention else None)
