"""A text classifier without recurrence: embeddings + sinusoidal positions -> self-attention ->
masked mean -> linear.

Shapes: B reviews, T tokens (padded), E embedding size, nh heads. `mask` (B, T) is True on real
tokens.
"""

import torch
from torch import nn

from attnexp.models.lstm import attention_norm, self_attention_layer
from attnexp.models.output import ModelOutput
from attnexp.modules import masked_mean
from attnexp.modules.embeddings import SinusoidalPositionalEncoding
from attnexp.modules.init import init_linear_layers


class SelfAttentionClassifier(nn.Module):
    """Args:
    num_heads / attention / attn_norm / attn_dropout: as `LSTMSelfAttention`'s; embed_dim must
        be divisible by num_heads.
    max_seq_len: longest input (the positional table's size), from the DataModule.
    embed_init: "normal" (torch's N(0, 1)). Xavier's small embeddings would drown under the
        added positions (std ~0.7), so it is refused.
    """

    input_kind = "tokens"

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        num_heads: int = 8,
        attention: str = "mhsa",
        attn_norm: str = "none",
        embed_dim: int = 128,
        dropout: float = 0.0,
        embed_dropout: float = 0.0,
        attn_dropout: float = 0.0,
        pad_id: int = 0,
        embed_init: str = "normal",
        linear_init: str = "torch",
        max_seq_len: int = 512,
    ) -> None:
        super().__init__()
        if embed_init != "normal":
            std = (2 / (vocab_size + embed_dim)) ** 0.5
            raise ValueError(
                f"embed_init={embed_init} must be normal: sinusoidal positions (std ~0.7) would "
                f"drown embeddings started at std {std:.3f}"
            )
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.embed_dropout = nn.Dropout(embed_dropout)
        self.positions = SinusoidalPositionalEncoding(max_seq_len, embed_dim)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(embed_dim, num_classes)
        self.attn_norm = attention_norm(attn_norm, embed_dim)
        self.self_attention = self_attention_layer(
            attention, embed_dim, num_heads, attn_dropout, f"embed_dim={embed_dim}"
        )
        init_linear_layers(self, linear_init)

    def forward(
        self, input_ids: torch.Tensor, mask: torch.Tensor, return_attention: bool = False
    ) -> ModelOutput:
        """input_ids (B, T), mask (B, T) -> logits (B, classes), weights (B, nh, T, T)."""
        B, T = input_ids.shape
        embedded = self.embedding(input_ids) + self.positions(T)  # (B, T, E)
        features = self.embed_dropout(embedded)
        attended, weights = self.self_attention(
            self.attn_norm(features), mask, need_weights=return_attention
        )  # (B, T, E), (B, nh, T, T) or None
        logits = self.head(self.dropout(masked_mean(attended, mask)))  # (B, classes)
        return ModelOutput(logits, weights)
