"""Input embeddings for Transformer encoders: tokens (scaled by sqrt(E)), segments and positions.

Shapes: B batch, T tokens, E embedding size.
"""

import math

import torch
from torch import nn

from attnexp.errors import ConfigError

POSITIONS = ("sinusoidal", "learned")


def sinusoidal_table(max_len: int, embed_dim: int) -> torch.Tensor:
    """(max_len, E): PE[p, 2i] = sin(p / 10000^(2i/E)), PE[p, 2i+1] = cos(p / 10000^(2i/E))."""
    positions = torch.arange(max_len, dtype=torch.float32)[:, None]  # (L, 1)
    frequencies = torch.exp(
        torch.arange(0, embed_dim, 2, dtype=torch.float32) * (-math.log(10000.0) / embed_dim)
    )
    table = torch.zeros(max_len, embed_dim)
    table[:, 0::2] = torch.sin(positions * frequencies)
    table[:, 1::2] = torch.cos(positions * frequencies[: embed_dim // 2])
    return table


def check_length(length: int, max_len: int) -> None:
    """A position table has rows for max_len tokens; a longer input has no position to take."""
    if length > max_len:
        raise ConfigError(
            f"sequence of {length} tokens is longer than the model's max_seq_len={max_len} "
            f"(set data.max_seq_len <= {max_len}, or retrain with a larger one)"
        )


class TokenEmbedding(nn.Module):
    """ids (B, T) -> (B, T, E), multiplied by sqrt(E) as in Vaswani et al.

    Initialised N(0, 1/E), so the scaled embedding starts at unit variance, like the positions.
    """

    def __init__(self, vocab_size: int, embed_dim: int, padding_idx: int | None = None) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=padding_idx)
        nn.init.normal_(self.embedding.weight, std=embed_dim**-0.5)
        if padding_idx is not None:
            with torch.no_grad():
                self.embedding.weight[padding_idx].zero_()
        self.scale = math.sqrt(embed_dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embedding(ids) * self.scale


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed positions: T -> (T, E) rows of the sinusoid table (a buffer, not trained)."""

    def __init__(self, max_len: int, embed_dim: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.register_buffer("table", sinusoidal_table(max_len, embed_dim), persistent=False)

    def forward(self, length: int) -> torch.Tensor:
        check_length(length, self.max_len)
        return self.table[:length]


class LearnedPositionalEmbedding(nn.Module):
    """Trained positions: T -> (T, E)."""

    def __init__(self, max_len: int, embed_dim: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, embed_dim)
        nn.init.normal_(self.embedding.weight, std=0.02)

    def forward(self, length: int) -> torch.Tensor:
        check_length(length, self.max_len)
        return self.embedding.weight[:length]


class PairEmbeddings(nn.Module):
    """BERT-style input: token * sqrt(E) + segment + position, then LayerNorm and dropout.

    Args:
        vocab_size, embed_dim: token table size.
        max_len: the longest sequence accepted (positions 0..max_len-1).
        position: sinusoidal (fixed) | learned.
        num_segments: 2 for sentence pairs.
        padding_idx: the [PAD] id (its embedding stays zero).
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        max_len: int,
        position: str = "sinusoidal",
        num_segments: int = 2,
        dropout: float = 0.1,
        padding_idx: int | None = 0,
    ) -> None:
        super().__init__()
        if position not in POSITIONS:
            raise ValueError(f"position='{position}' is not one of {', '.join(POSITIONS)}")
        self.tokens = TokenEmbedding(vocab_size, embed_dim, padding_idx)
        self.segments = nn.Embedding(num_segments, embed_dim)
        nn.init.normal_(self.segments.weight, std=0.02)
        table = (
            SinusoidalPositionalEncoding if position == "sinusoidal" else LearnedPositionalEmbedding
        )
        self.positions = table(max_len, embed_dim)
        self.norm = nn.LayerNorm(embed_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, input_ids: torch.Tensor, segment_ids: torch.Tensor, extra: torch.Tensor | None = None
    ) -> torch.Tensor:
        """input_ids, segment_ids (B, T), extra (B, T, E) added before the norm -> (B, T, E)."""
        B, T = input_ids.shape
        x = (
            self.tokens(input_ids) + self.segments(segment_ids) + self.positions(T)[None]
        )  # (B, T, E)
        if extra is not None:
            x = x + extra
        return self.dropout(self.norm(x))
