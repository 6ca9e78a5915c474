"""BiLSTM text classifiers: mean pooling, attention pooling, multi-head self-attention.

Shapes: B reviews, T tokens (padded), E embedding size, H LSTM hidden size per direction,
D = 2H (bidirectional) features per token, nh heads. `mask` (B, T) is True on real tokens.
"""

from collections.abc import Callable

import torch
from torch import nn

from attnexp.errors import ConfigError, require_probability
from attnexp.modules import AttentionPooling, MultiHeadSelfAttention, Scorer, masked_mean
from attnexp.modules.embeddings import SinusoidalPositionalEncoding
from attnexp.modules.init import init_linear_layers
from attnexp.modules.lstm import LSTMEncoder
from attnexp.modules.mhsa import SimpleSelfAttention, check_heads

SELF_ATTENTIONS = ("mhsa", "simple")
ATTN_NORMS = ("none", "layer")


class _TextClassifier(nn.Module):
    """Shared parts: the encoder and the classifier head; subclasses pool the token features.

    `linear_init` ("torch" | "xavier", see modules/init.py) starts every linear layer (head,
    scorer, self-attention projections); `embed_init` the embeddings (see LSTMEncoder).
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
        require_probability("model.dropout", dropout)
        require_probability("model.embed_dropout", embed_dropout)
        self.encoder = LSTMEncoder(
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
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(self.encoder.output_dim, num_classes)
        if type(self).__init__ is _TextClassifier.__init__:
            # No layers of its own (mean pooling). The others add theirs first, then call this.
            init_linear_layers(self, linear_init)

    def pool(
        self, features: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        raise NotImplementedError

    def forward(self, input_ids: torch.Tensor, mask: torch.Tensor, return_attention: bool = False):
        """input_ids (B, T), mask (B, T) -> logits (B, classes) [, attention or None]."""
        features = self.encoder(input_ids, mask)  # (B, T, D)
        pooled, attention = self.pool(features, mask)  # (B, D)
        logits = self.head(self.dropout(pooled))
        return (logits, attention) if return_attention else logits


class LSTMMean(_TextClassifier):
    """BiLSTM -> masked mean over tokens -> linear: the no-attention baseline."""

    def pool(self, features, mask):
        return masked_mean(features, mask), None


class LSTMAttention(_TextClassifier):
    """BiLSTM -> attention pooling with a learned task query (scorer from `scorer=`) -> linear."""

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
        super().__init__(
            vocab_size,
            num_classes,
            embed_dim,
            hidden_size,
            num_layers,
            dropout,
            embed_dropout,
            pad_id,
            rnn_impl,
            embed_init,
            linear_init,
        )
        if scorer is None:
            # No list of names here: the runner refuses this first, listing conf/scorer/.
            raise ConfigError("lstm_attn needs a scorer (set scorer=additive|dot|...)")
        self.attention = AttentionPooling(
            self.encoder.output_dim, scorer, query="learned", query_init=query_init
        )
        init_linear_layers(self, linear_init)

    def pool(self, features, mask):
        return self.attention(features, mask)  # (B, D), (B, T)


class LSTMSelfAttention(_TextClassifier):
    """BiLSTM (or embeddings + positions) -> self-attention -> masked mean -> linear.

    Args:
        heads: attention heads; the feature size (2 * hidden_size, or embed_dim without LSTM) must
            be divisible by it.
        attention: "mhsa" (multi-head, learned projections) or "simple" (softmax(X X^T) X).
        attn_norm: "layer": a LayerNorm on the features before the self-attention (the scores are
            products of two projected features, so small BiLSTM states give near-uniform
            weights); "none": the features as they come. With attention="simple" (no scaling),
            normalised features make each token attend almost only to itself.
        use_lstm: false: no LSTM; embeddings plus sinusoidal positions go straight to attention.
        max_seq_len: longest input (positional table size when use_lstm is false).
        embed_init: as for LSTMEncoder; None: "xavier" with the LSTM, "normal" without (the
            added positions, std ~0.7, would drown Xavier's small embeddings).
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        heads: int = 8,
        attention: str = "mhsa",
        attn_norm: str = "none",
        use_lstm: bool = True,
        embed_dim: int = 128,
        hidden_size: int = 128,
        num_layers: int = 1,
        dropout: float = 0.0,
        embed_dropout: float = 0.0,
        attn_dropout: float = 0.0,
        pad_id: int = 0,
        rnn_impl: str = "auto",
        embed_init: str | None = "normal",
        linear_init: str = "torch",
        max_seq_len: int = 512,
    ) -> None:
        if embed_init is None:  # Xavier's small embeddings suit the LSTM, not added positions
            embed_init = "xavier" if use_lstm else "normal"
        super().__init__(
            vocab_size,
            num_classes,
            embed_dim,
            hidden_size,
            num_layers,
            dropout,
            embed_dropout,
            pad_id,
            rnn_impl,
            embed_init,
            linear_init,
        )
        require_probability("model.attn_dropout", attn_dropout)
        if attention not in SELF_ATTENTIONS:
            raise ConfigError(
                f"model.attention '{attention}' is not one of {', '.join(SELF_ATTENTIONS)} "
                f"(set model.attention=...)"
            )
        if attn_norm not in ATTN_NORMS:
            raise ConfigError(
                f"model.attn_norm '{attn_norm}' is not one of {', '.join(ATTN_NORMS)} "
                f"(set model.attn_norm=...)"
            )
        if not use_lstm and embed_init == "xavier":
            std = (2 / (vocab_size + embed_dim)) ** 0.5
            raise ConfigError(
                f"model.use_lstm=false adds sinusoidal positions (std ~0.7) to the embeddings, and "
                f"model.embed_init=xavier starts these at std {std:.3f}: the positions would drown "
                f"the words (set model.embed_init=normal)"
            )
        self.use_lstm = use_lstm
        width = self.encoder.output_dim if use_lstm else embed_dim
        if not use_lstm:
            del self.encoder.lstm  # only the embedding is used
            self.positions = SinusoidalPositionalEncoding(max_seq_len, embed_dim)
            self.head = nn.Linear(width, num_classes)
        self.attn_norm = nn.LayerNorm(width) if attn_norm == "layer" else nn.Identity()
        if attention == "mhsa":
            check_heads(width, heads, "model.hidden_size" if use_lstm else "model.embed_dim")
            self.self_attention = MultiHeadSelfAttention(width, heads, dropout=attn_dropout)
        else:
            self.self_attention = SimpleSelfAttention()
        init_linear_layers(self, linear_init)

    def forward(self, input_ids: torch.Tensor, mask: torch.Tensor, return_attention: bool = False):
        """input_ids (B, T), mask (B, T) -> logits (B, classes) [, weights (B, nh, T, T)]."""
        B, T = input_ids.shape
        if self.use_lstm:
            features = self.encoder(input_ids, mask)  # (B, T, D)
        else:
            embedded = self.encoder.embedding(input_ids) + self.positions(T)  # (B, T, E)
            features = self.encoder.embed_dropout(embedded)
        attended, weights = self.self_attention(
            self.attn_norm(features), mask, need_weights=return_attention
        )
        logits = self.head(self.dropout(masked_mean(attended, mask)))  # (B, classes)
        return (logits, weights) if return_attention else logits
