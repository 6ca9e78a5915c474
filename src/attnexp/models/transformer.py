"""Transformer-encoder sentence-pair matcher (nndl 8.3-8.4): [CLS] a [SEP] b [SEP] -> same / different.

Embeddings (token * sqrt(H) + segment + position, LayerNorm, dropout) -> `num_layers` encoder blocks ->
the [CLS] vector -> dense + tanh (the "pooler") -> dropout -> classifier.
Shapes: B pairs, T tokens, H hidden size, nh heads.
"""

import torch
from torch import nn

from attnexp.models.output import ModelOutput
from attnexp.modules.embeddings import PairEmbeddings
from attnexp.modules.transformer import TorchEncoderBlock, TransformerEncoderBlock

IMPLS = ("custom", "torch")


def exact_match(
    input_ids: torch.Tensor, segment_ids: torch.Tensor, mask: torch.Tensor, unk_id: int
) -> torch.Tensor:
    """(B, T) bool: the token also occurs in the other sentence of the pair (DrQA's exact match).

    An [UNK] (`unk_id`) never matches: two unknown characters share the id, not the character.
    """
    same = input_ids[:, :, None] == input_ids[:, None, :]  # (B, T, T)
    other = segment_ids[:, :, None] != segment_ids[:, None, :]  # (B, T, T)
    real = mask[:, :, None] & mask[:, None, :]  # (B, T, T)
    matches = (same & other & real).any(dim=-1)  # (B, T)
    return matches & (input_ids != unk_id)


class TransformerMatcher(nn.Module):
    """[CLS] a [SEP] b [SEP] -> logits over {not similar, similar}.

    Args:
        vocab_size, pad_id, unk_id, max_seq_len, num_classes: from the DataModule.
        hidden_size, num_layers, num_heads, ffn_size: encoder sizes.
        dropout: embeddings, residuals, feed-forward, classifier; attention_dropout: attention weights.
        position: sinusoidal | learned.
        impl: custom (our blocks) | torch (`nn.TransformerEncoderLayer`, one dropout rate: then
            attention_dropout must equal dropout).
        norm: post | pre (pre-norm adds a final LayerNorm after the last block).
        activation: relu | gelu (feed-forward).
        fused_attention: custom blocks use `F.scaled_dot_product_attention` unless weights are asked for.
        match_embedding: add a learned embedding of `exact_match` (does this character occur in the
            other sentence?) to the input: a classic matching feature, off in the reference setting.
            Needs `unk_id`: an [UNK] never matches.
    """

    input_kind = "pairs"

    def __init__(
        self,
        vocab_size: int,
        num_classes: int = 2,
        pad_id: int = 0,
        unk_id: int | None = None,
        max_seq_len: int = 512,
        hidden_size: int = 256,
        num_layers: int = 2,
        num_heads: int = 4,
        ffn_size: int = 1024,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        position: str = "sinusoidal",
        impl: str = "custom",
        norm: str = "post",
        activation: str = "relu",
        fused_attention: bool = True,
        match_embedding: bool = False,
    ) -> None:
        super().__init__()
        if match_embedding and unk_id is None:
            raise ValueError("match_embedding=true needs unk_id, the tokenizer's [UNK] id")
        if impl not in IMPLS:
            raise ValueError(f"impl='{impl}' is not one of {', '.join(IMPLS)}")
        if impl == "torch" and attention_dropout != dropout:
            raise ValueError(
                f"impl='torch' has one dropout rate: attention_dropout={attention_dropout} must "
                f"equal dropout={dropout} (or impl='custom')"
            )
        self.embeddings = PairEmbeddings(
            vocab_size, hidden_size, max_seq_len, position, 2, dropout, pad_id
        )
        self.unk_id = unk_id
        self.match = nn.Embedding(2, hidden_size) if match_embedding else None
        if self.match is not None:
            nn.init.normal_(self.match.weight, std=0.02)
        block_args = dict(
            embed_dim=hidden_size,
            num_heads=num_heads,
            ffn_size=ffn_size,
            dropout=dropout,
            attention_dropout=attention_dropout,
            activation=activation,
            norm=norm,
        )
        if impl == "custom":
            blocks = [
                TransformerEncoderBlock(**block_args, fused_attention=fused_attention)
                for _ in range(num_layers)
            ]
        else:
            blocks = [TorchEncoderBlock(**block_args) for _ in range(num_layers)]
        self.blocks = nn.ModuleList(blocks)
        self.final_norm = nn.LayerNorm(hidden_size) if norm == "pre" else nn.Identity()
        self.pooler = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.Tanh())
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden_size, num_classes)

    def forward(
        self,
        input_ids: torch.Tensor,
        segment_ids: torch.Tensor,
        mask: torch.Tensor,
        return_attention: bool = False,
    ) -> ModelOutput:
        """input_ids, segment_ids, mask (B, T) -> logits (B, C), attention if asked: one
        (B, nh, T, T) per block."""
        matches = (
            None if self.match is None else exact_match(input_ids, segment_ids, mask, self.unk_id)
        )  # (B, T)
        extra = None if matches is None else self.match(matches.long())  # (B, T, H)
        x = self.embeddings(input_ids, segment_ids, extra)  # (B, T, H)
        attention = []
        for block in self.blocks:
            x, weights = block(x, mask, need_weights=return_attention)
            attention.append(weights)
        cls = self.final_norm(x)[:, 0]  # (B, H): the [CLS] position
        logits = self.classifier(self.dropout(self.pooler(cls)))  # (B, C)
        return ModelOutput(logits, attention if return_attention else None)
