"""Encoder-decoder Transformer (Vaswani et al. 2017) from the project's blocks.

Shapes: B batch, S source tokens, U target steps, E = hidden_size, V target vocabulary.
Encoder: token embedding * sqrt(E) + positions -> `TransformerEncoderBlock` x num_layers (the LCQMC
matcher's block). Decoder: the same embedding scheme -> `TransformerDecoderBlock` x num_layers (causal
self-attention, cross-attention) -> linear to the vocabulary (tied to the target embedding by
default). Pre-norm stacks end with a LayerNorm.
"""

import torch
from torch import nn

from attnexp.models.output import ModelOutput
from attnexp.modules.embeddings import (
    POSITIONS,
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
)
from attnexp.modules.transformer import TransformerEncoderBlock
from attnexp.modules.transformer_decoder import TransformerDecoderBlock


class Embed(nn.Module):
    """ids (B, T) -> token * sqrt(E) + position, dropout -> (B, T, E)."""

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        max_len: int,
        position: str,
        dropout: float,
        pad_id: int,
    ):
        super().__init__()
        self.tokens = TokenEmbedding(vocab_size, embed_dim, pad_id)
        table = (
            SinusoidalPositionalEncoding if position == "sinusoidal" else LearnedPositionalEmbedding
        )
        self.positions = table(max_len, embed_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.tokens(ids) + self.positions(ids.shape[1])[None])


class TransformerSeq2Seq(nn.Module):
    """Args: vocabulary sizes and max_len (position table rows) from the DataModule; the rest as
    the LCQMC Transformer's keys (hidden_size, num_layers, num_heads, ffn_size, dropout, norm, ...)."""

    input_kind = "translation"

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        max_len: int = 128,
        hidden_size: int = 256,
        num_layers: int = 3,
        num_heads: int = 8,
        ffn_size: int = 512,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        norm: str = "pre",
        activation: str = "relu",
        position: str = "sinusoidal",
        tie_embeddings: bool = True,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        if position not in POSITIONS:
            raise ValueError(f"position='{position}' is not one of {', '.join(POSITIONS)}")
        self.pad_id = pad_id
        self.src_embed = Embed(src_vocab_size, hidden_size, max_len, position, dropout, pad_id)
        self.tgt_embed = Embed(tgt_vocab_size, hidden_size, max_len, position, dropout, pad_id)
        block = dict(
            dropout=dropout, attention_dropout=attention_dropout, activation=activation, norm=norm
        )
        self.encoder = nn.ModuleList(
            TransformerEncoderBlock(hidden_size, num_heads, ffn_size, **block)
            for _ in range(num_layers)
        )
        self.decoder = nn.ModuleList(
            TransformerDecoderBlock(hidden_size, num_heads, ffn_size, **block)
            for _ in range(num_layers)
        )
        final = nn.LayerNorm if norm == "pre" else nn.Identity
        self.encoder_norm, self.decoder_norm = final(hidden_size), final(hidden_size)
        self.generator = nn.Linear(hidden_size, tgt_vocab_size)
        if tie_embeddings:
            self.generator.weight = self.tgt_embed.tokens.embedding.weight

    def encode(self, src_ids: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        x = self.src_embed(src_ids)  # (B, S, E)
        for block in self.encoder:
            x, _ = block(x, src_mask)
        return self.encoder_norm(x)

    def decode(self, memory, src_mask, tgt_in, need_weights: bool = False):
        """-> logits (B, U, V), the last layer's cross-attention (B, nh, U, S) or None."""
        x, tgt_mask = self.tgt_embed(tgt_in), tgt_in != self.pad_id  # (B, U, E), (B, U)
        tgt_mask[:, 0] = True  # BOS
        weights = None
        for i, block in enumerate(self.decoder):
            x, weights = block(
                x, memory, tgt_mask, src_mask, need_weights and i == len(self.decoder) - 1
            )
        return self.generator(self.decoder_norm(x)), weights

    def start(self, src_ids: torch.Tensor, src_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        memory = self.encode(src_ids, src_mask)
        prefix = src_ids.new_zeros(src_ids.shape[0], 0)
        return {"memory": memory, "src_mask": src_mask, "prefix": prefix}

    def step(self, state: dict[str, torch.Tensor], prev: torch.Tensor):
        """Decodes the whole prefix again (no key/value cache: sentences here are short)."""
        prefix = torch.cat([state["prefix"], prev[:, None]], dim=1)  # (B, t)
        logits, weights = self.decode(state["memory"], state["src_mask"], prefix, need_weights=True)
        return logits[:, -1], {**state, "prefix": prefix}, weights[:, :, -1].mean(dim=1)  # (B, S)

    def forward(
        self,
        src_ids: torch.Tensor,
        src_mask: torch.Tensor,
        tgt_in: torch.Tensor,
        return_attention: bool = False,
    ) -> ModelOutput:
        """src (B, S), tgt_in (B, U) -> logits (B, U, V), attention (B, U, S) (heads averaged)."""
        memory = self.encode(src_ids, src_mask)
        logits, weights = self.decode(memory, src_mask, tgt_in, need_weights=return_attention)
        return ModelOutput(logits, None if weights is None else weights.mean(dim=1))
