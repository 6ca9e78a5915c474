"""What every model's forward returns."""

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class ModelOutput:
    """logits (B, classes), and the attention weights when the call asked for them (else None).

    The attention's form is the model's: pooling weights (B, T), self-attention weights
    (B, nh, T, T), or one (B, nh, T, T) per layer; None for models without attention.
    The encoder-decoders return logits (B, U, V) and the target-over-source attention (B, U, S)
    (the Transformer's last layer, averaged over heads).
    """

    logits: torch.Tensor
    attention: Any = None
