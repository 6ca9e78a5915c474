"""The Transformer decoder block: causal self-attention, cross-attention over a memory, feed-forward.

Shapes: B batch, U queries (target steps), S keys (source tokens, or U for self-attention),
E embedding, nh heads, hd = E / nh. Masks are bool, True = may be attended to.
"""

import torch
from torch import nn

from attnexp.modules.mhsa import MultiHeadAttention
from attnexp.modules.transformer import PositionwiseFeedForward, check_block_args


def causal_mask(length: int, device: torch.device) -> torch.Tensor:
    """(U, U): position u may attend to positions <= u."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


class TransformerDecoderBlock(nn.Module):
    """Causal self-attention, cross-attention over the encoder output, feed-forward; each with
    residual, dropout and LayerNorm, after (post) or before (pre) the sublayer."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        ffn_size: int,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        activation: str = "relu",
        norm: str = "post",
    ) -> None:
        super().__init__()
        check_block_args(norm, activation)
        self.self_attn = MultiHeadAttention(
            embed_dim, num_heads, attention_dropout, fused_qkv=False
        )
        self.cross_attn = MultiHeadAttention(
            embed_dim, num_heads, attention_dropout, fused_qkv=False
        )
        self.feed_forward = PositionwiseFeedForward(embed_dim, ffn_size, dropout, activation)
        self.norms = nn.ModuleList(nn.LayerNorm(embed_dim) for _ in range(3))
        self.dropout = nn.Dropout(dropout)
        self.pre_norm = norm == "pre"

    def _sublayer(
        self, x: torch.Tensor, index: int, fn
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.pre_norm:
            out, weights = fn(self.norms[index](x))
            return x + self.dropout(out), weights
        out, weights = fn(x)
        return self.norms[index](x + self.dropout(out)), weights

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor,
        src_mask: torch.Tensor,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, U, E), memory (B, S, E), tgt_mask (B, U), src_mask (B, S) -> x (B, U, E) and
        the cross-attention weights (B, nh, U, S) or None."""
        U = x.shape[1]
        self_mask = causal_mask(U, x.device)[None] & tgt_mask[:, None, :]  # (B, U, U)
        x, _ = self._sublayer(x, 0, lambda h: self.self_attn(h, self_mask))
        x, weights = self._sublayer(
            x, 1, lambda h: self.cross_attn(h, src_mask, memory=memory, need_weights=need_weights)
        )
        x, _ = self._sublayer(x, 2, lambda h: (self.feed_forward(h), None))
        return x, weights
