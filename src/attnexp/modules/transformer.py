"""Transformer encoder blocks: ours (from MultiHeadAttention) and a wrapper of PyTorch's.

Both take x (B, T, E) and a bool mask (B, T) (True = real token) and return (x, weights) with
weights (B, nh, T, T) when asked for, else None. Post-norm (Vaswani et al., BERT):
x = LN(x + Drop(SA(x))); x = LN(x + Drop(FF(x))). Pre-norm: x = x + Drop(SA(LN(x))); ... .
"""

import torch
import torch.nn.functional as F
from torch import nn

from attnexp.modules.mhsa import MultiHeadAttention, check_heads

NORMS = ("post", "pre")
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def check_block_args(norm: str, activation: str) -> None:
    if norm not in NORMS:
        raise ValueError(f"norm='{norm}' is not one of {', '.join(NORMS)}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation='{activation}' is not one of {', '.join(ACTIVATIONS)}")


class PositionwiseFeedForward(nn.Module):
    """(B, T, E) -> (B, T, E): Linear(E, F) -> activation -> dropout -> Linear(F, E), per position."""

    def __init__(
        self, embed_dim: int, ffn_size: int, dropout: float = 0.1, activation: str = "relu"
    ) -> None:
        super().__init__()
        self.linear1 = nn.Linear(embed_dim, ffn_size)
        self.linear2 = nn.Linear(ffn_size, embed_dim)
        self.dropout = nn.Dropout(dropout)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class TransformerEncoderBlock(nn.Module):
    """Our block: MultiHeadAttention + feed-forward, each with residual, dropout and LayerNorm.

    Parameter names follow `nn.TransformerEncoderLayer` (norm1, norm2, dropout1, dropout2) so the
    two can be compared with copied weights. `fused_attention=False` forces the explicit
    softmax(QK^T/sqrt(d))V path instead of `F.scaled_dot_product_attention` (for benchmarks).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        ffn_size: int,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        activation: str = "relu",
        norm: str = "post",
        layer_norm_eps: float = 1e-5,
        fused_attention: bool = True,
    ) -> None:
        super().__init__()
        check_block_args(norm, activation)
        self.self_attn = MultiHeadAttention(embed_dim, num_heads, dropout=attention_dropout)
        self.feed_forward = PositionwiseFeedForward(embed_dim, ffn_size, dropout, activation)
        self.norm1 = nn.LayerNorm(embed_dim, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(embed_dim, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.pre_norm = norm == "pre"
        self.fused_attention = fused_attention

    def _attend(self, x: torch.Tensor, mask: torch.Tensor | None, need_weights: bool):
        out, weights = self.self_attn(
            x, mask, need_weights=need_weights or not self.fused_attention
        )
        return self.dropout1(out), weights if need_weights else None

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, E), mask (B, T) -> x (B, T, E), weights (B, nh, T, T) or None."""
        if self.pre_norm:
            attended, weights = self._attend(self.norm1(x), mask, need_weights)
            x = x + attended
            x = x + self.dropout2(self.feed_forward(self.norm2(x)))
        else:
            attended, weights = self._attend(x, mask, need_weights)
            x = self.norm1(x + attended)
            x = self.norm2(x + self.dropout2(self.feed_forward(x)))
        return x, weights


class TorchEncoderBlock(nn.Module):
    """`nn.TransformerEncoderLayer` behind the same interface as `TransformerEncoderBlock`.

    PyTorch's layer does not return attention weights; when they are asked for, they are
    recomputed from its own `self_attn` on the block input (an extra pass, for figures only).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        ffn_size: int,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        activation: str = "relu",
        norm: str = "post",
        layer_norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        check_block_args(norm, activation)
        check_heads(embed_dim, num_heads)
        if attention_dropout != dropout:  # nn.TransformerEncoderLayer has one rate for both
            raise ValueError(f"attention_dropout={attention_dropout} must equal dropout={dropout}")
        self.layer = nn.TransformerEncoderLayer(
            embed_dim,
            num_heads,
            ffn_size,
            dropout,
            activation=activation,
            layer_norm_eps=layer_norm_eps,
            batch_first=True,
            norm_first=norm == "pre",
        )

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, E), mask (B, T) -> out (B, T, E), weights (B, nh, T, T) or None."""
        padding = None if mask is None else ~mask  # PyTorch: True = ignore
        weights = None
        if need_weights:
            h = self.layer.norm1(x) if self.layer.norm_first else x
            _, weights = self.layer.self_attn(
                h, h, h, key_padding_mask=padding, need_weights=True, average_attn_weights=False
            )  # (B, nh, T, T)
        return self.layer(x, src_key_padding_mask=padding), weights
