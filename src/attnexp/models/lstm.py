"""BiLSTM text classifiers: mean pooling, attention pooling, multi-head self-attention.

Each is an `LSTMEncoder`, a pooling of the token features, dropout and a linear head.
Shapes: B reviews, T tokens (padded), E embedding size, H LSTM hidden size per direction,
D = 2H (bidirectional) features per token, nh heads. `mask` (B, T) is True on real tokens.
"""

from collections.abc import Callable

import torch
from torch import nn

from attnexp.models.output import ModelOutput
from attnexp.modules import AttentionPooling, MultiHeadAttention, Scorer, masked_mean
from attnexp.modules.init import init_linear_layers
from attnexp.modules.lstm import LSTMEncoder
from attnexp.modules.mhsa import SimpleSelfAttention

SELF_ATTENTIONS = ("mhsa", "simple")
ATTN_NORMS = ("none", "layer")


def text_encoder(
    vocab_size: int,
    embed_dim: int,
    hidden_size: int,
    num_layers: int,
    dropout: float,
    embed_dropout: float,
    pad_id: int,
    rnn_impl: str,
    embed_init: str,
) -> LSTMEncoder:
    """The BiLSTM encoder every model here starts with (`embed_init`: see LSTMEncoder)."""
    return LSTMEncoder(
        vocab_size,
        embed_dim,
        hidden_size,
        num_layers,
        dropout,
        embed_dropout,
        pad_id=pad_id,
        rnn_impl=rnn_impl,
        embed_init=embed_init,
    )


def self_attention_layer(
    kind: str, features: int, num_heads: int, attn_dropout: float, sized_by: str
) -> nn.Module:
    """ "mhsa" (multi-head, learned projections) or "simple" (softmax(X X^T) X, no parameters)
    over `features` features; `sized_by` says which argument sets them (`embed_dim=128`)."""
    if kind not in SELF_ATTENTIONS:
        raise ValueError(f"attention='{kind}' is not one of {', '.join(SELF_ATTENTIONS)}")
    if kind == "simple":
        return SimpleSelfAttention()
    if features % num_heads:
        raise ValueError(f"num_heads={num_heads} must divide the {features} features ({sized_by})")
    return MultiHeadAttention(features, num_heads, dropout=attn_dropout)


def attention_norm(kind: str, width: int) -> nn.Module:
    if kind not in ATTN_NORMS:
        raise ValueError(f"attn_norm='{kind}' is not one of {', '.join(ATTN_NORMS)}")
    return nn.LayerNorm(width) if kind == "layer" else nn.Identity()


class LSTMMean(nn.Module):
    """BiLSTM -> masked mean over tokens -> linear: the no-attention baseline.

    `linear_init` ("torch" | "xavier", see modules/init.py) starts every linear layer;
    `embed_init` the embeddings (see LSTMEncoder).
    """

    input_kind = "tokens"

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        embed_dim: int = 128,
        hidden_size: int = 128,
        num_layers: int = 1,
        dropout: float = 0.0,
        embed_dropout: float = 0.0,
        pad_id: int = 0,
        rnn_impl: str = "auto",
        embed_init: str = "normal",
        linear_init: str = "torch",
    ) -> None:
        super().__init__()
        self.encoder = text_encoder(
            vocab_size, embed_dim, hidden_size, num_layers, dropout, embed_dropout, pad_id,
            rnn_impl, embed_init,
        )  # fmt: skip
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(self.encoder.output_dim, num_classes)
        init_linear_layers(self, linear_init)

    def forward(
        self, input_ids: torch.Tensor, mask: torch.Tensor, return_attention: bool = False
    ) -> ModelOutput:
        """input_ids (B, T), mask (B, T) -> logits (B, classes); no attention."""
        features = self.encoder(input_ids, mask)  # (B, T, D)
        return ModelOutput(self.head(self.dropout(masked_mean(features, mask))))


class LSTMAttention(nn.Module):
    """BiLSTM -> attention pooling with a learned task query (scorer from `scorer=`) -> linear."""

    input_kind = "tokens"

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        scorer: Callable[..., Scorer] | None = None,
        embed_dim: int = 128,
        hidden_size: int = 128,
        num_layers: int = 1,
        dropout: float = 0.0,
        embed_dropout: float = 0.0,
        pad_id: int = 0,
        rnn_impl: str = "auto",
        embed_init: str = "normal",
        query_init: str = "normal",
        linear_init: str = "torch",
    ) -> None:
        super().__init__()
        self.encoder = text_encoder(
            vocab_size, embed_dim, hidden_size, num_layers, dropout, embed_dropout, pad_id,
            rnn_impl, embed_init,
        )  # fmt: skip
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(self.encoder.output_dim, num_classes)
        if scorer is None:
            # The runner refuses this first, listing conf/scorer/ (runner/build.check_config).
            raise ValueError("LSTMAttention needs a scorer")
        self.attention = AttentionPooling(
            self.encoder.output_dim, scorer, query="learned", query_init=query_init
        )
        init_linear_layers(self, linear_init)

    def forward(
        self, input_ids: torch.Tensor, mask: torch.Tensor, return_attention: bool = False
    ) -> ModelOutput:
        """input_ids (B, T), mask (B, T) -> logits (B, classes), pooling weights (B, T)."""
        features = self.encoder(input_ids, mask)  # (B, T, D)
        pooled, weights = self.attention(features, mask)  # (B, D), (B, T)
        logits = self.head(self.dropout(pooled))
        return ModelOutput(logits, weights if return_attention else None)


class LSTMSelfAttention(nn.Module):
    """BiLSTM -> self-attention -> masked mean -> linear.

    Args:
        num_heads: attention heads; 2 * hidden_size must be divisible by it.
        attention: "mhsa" (multi-head, learned projections) or "simple" (softmax(X X^T) X).
        attn_norm: "layer": a LayerNorm on the features before the self-attention (the scores are
            products of two projected features, so small BiLSTM states give near-uniform
            weights); "none": the features as they come. With attention="simple" (no scaling),
            normalised features make each token attend almost only to itself.
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
        hidden_size: int = 128,
        num_layers: int = 1,
        dropout: float = 0.0,
        embed_dropout: float = 0.0,
        attn_dropout: float = 0.0,
        pad_id: int = 0,
        rnn_impl: str = "auto",
        embed_init: str = "normal",
        linear_init: str = "torch",
    ) -> None:
        super().__init__()
        self.encoder = text_encoder(
            vocab_size, embed_dim, hidden_size, num_layers, dropout, embed_dropout, pad_id,
            rnn_impl, embed_init,
        )  # fmt: skip
        width = self.encoder.output_dim
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(width, num_classes)
        self.attn_norm = attention_norm(attn_norm, width)
        self.self_attention = self_attention_layer(
            attention, width, num_heads, attn_dropout, f"2 * hidden_size={hidden_size}"
        )
        init_linear_layers(self, linear_init)

    def forward(
        self, input_ids: torch.Tensor, mask: torch.Tensor, return_attention: bool = False
    ) -> ModelOutput:
        """input_ids (B, T), mask (B, T) -> logits (B, classes), weights (B, nh, T, T)."""
        features = self.encoder(input_ids, mask)  # (B, T, D)
        attended, weights = self.self_attention(
            self.attn_norm(features), mask, need_weights=return_attention
        )  # (B, T, D), (B, nh, T, T) or None
        logits = self.head(self.dropout(masked_mean(attended, mask)))  # (B, classes)
        return ModelOutput(logits, weights)
