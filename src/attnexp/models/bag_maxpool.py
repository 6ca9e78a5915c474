"""Bag of digits -> per-item backbone -> max over the real items, feature by feature -> classifier.

The no-attention pooling baseline between bag_mlp (no pooling: a fixed-size flattened bag) and
bag_attn (learned weights): like bag_attn it takes bags of any size, but it learns no attention
weights, so the two together tell what attention adds over plain set pooling (for
`label_rule=largest` a max is already close to the rule).

Shapes: B bags, T items per bag (padded), C x S x S images, H hidden features.
"""

import torch
import torch.nn.functional as F
from torch import nn

from attnexp.models.bag import classifier_head, item_backbone
from attnexp.models.output import ModelOutput
from attnexp.modules.masking import masked_max


class BagMaxPool(nn.Module):
    """Backbone per item -> masked max over the bag -> classifier.

    With `return_attention=True` the "weights" (B, T) are the share of the H features that each
    item supplied to the max: not a softmax, but the same contract as bag_attn's (0 on padding,
    rows sum to 1), so the attention figures show which digits the model pooled.

    Args:
        backbone: "mlp" or "conv" (as bag_attn's).
        pooled_norm: BatchNorm on the pooled vector before the classifier.
    """

    input_kind = "bags"
    max_bag_size = None  # any bag size

    def __init__(
        self,
        num_classes: int,
        image_size: int,
        channels: int = 1,
        hidden_size: int = 256,
        backbone: str = "mlp",
        pooled_norm: bool = False,
    ) -> None:
        super().__init__()
        self.backbone = item_backbone(backbone, image_size, channels, hidden_size)
        self.head = classifier_head(hidden_size, num_classes, pooled_norm)

    def forward(
        self, items: torch.Tensor, mask: torch.Tensor, return_attention: bool = False
    ) -> ModelOutput:
        """items (B, T, C, S, S), mask (B, T) -> logits (B, classes), shares (B, T) if asked."""
        B, T = mask.shape
        features = self.backbone(items.flatten(0, 1)).view(B, T, -1)  # (B, T, H)
        pooled, winners = masked_max(features, mask)  # (B, H), (B, H)
        logits = self.head(pooled)
        if not return_attention:
            return ModelOutput(logits)
        shares = F.one_hot(winners, T).to(features.dtype).mean(dim=1)  # (B, T)
        return ModelOutput(logits, shares * mask.any(dim=1, keepdim=True))
