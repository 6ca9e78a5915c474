"""Multi-head attention of queries over a memory, and the Transformer decoder block built on it.

Shapes: B batch, U queries (target steps), S keys (source tokens, or U for self-attention),
E embedding, nh heads, hd = E / nh. Masks are bool, True = may be attended to.
"""

import torch
import torch.nn.functional as F
from torch import nn

from attnexp.modules.mhsa import attendable_keys, attention_weights, check_heads
from attnexp.modules.transformer import PositionwiseFeedForward, check_block_args


def causal_mask(length: int, device: torch.device) -> torch.Tensor:
    """(U, U): position u may attend to positions <= u."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


class MultiHeadAttention(nn.Module):
    """Queries (B, U, E) attend over a memory (B, S, E), with a key mask (B, S) or a per-query
    mask (B, U, S).

    Without `need_weights` it runs `F.scaled_dot_product_attention`; with it, the explicit
    softmax of `attention_weights` (padded keys get weight 0). A query with no real key sees all
    its keys (`attendable_keys`), in both paths.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        check_heads(embed_dim, num_heads)
        self.num_heads, self.head_dim, self.dropout = num_heads, embed_dim // num_heads, dropout
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.kv_proj = nn.Linear(embed_dim, 2 * embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(
        self,
        query: torch.Tensor,
        memory: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """-> out (B, U, E), weights (B, nh, U, S) or None."""
        B, U, E = query.shape
        S = memory.shape[1]
        q = (
            self.q_proj(query).view(B, U, self.num_heads, self.head_dim).transpose(1, 2)
        )  # (B, nh, U, hd)
        k, v = self.kv_proj(memory).split(E, dim=-1)  # 2 x (B, S, E)
        k, v = (
            t.view(B, S, self.num_heads, self.head_dim).transpose(1, 2) for t in (k, v)
        )  # (B, nh, S, hd)
        key_mask = attendable_keys(mask)  # (B, 1, 1, S) or (B, 1, U, S)
        dropout = self.dropout if self.training else 0.0
        if need_weights:
            weights = attention_weights(q, k, key_mask)  # (B, nh, U, S)
            out = F.dropout(weights, p=dropout, training=self.training) @ v  # (B, nh, U, hd)
        else:
            weights = None
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask, dropout_p=dropout)
        return self.out_proj(out.transpose(1, 2).reshape(B, U, E)), weights


class TransformerDecoderBlock(nn.Module):
    """Causal self-attention, cross-attention over the encoder output, feed-forward; each with
    residual, dropout and LayerNorm, after (post) or before (pre) the sublayer."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        ffn_dim: int,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        activation: str = "relu",
        norm: str = "post",
    ) -> None:
        super().__init__()
        check_block_args(norm, activation)
        self.self_attn = MultiHeadAttention(embed_dim, num_heads, attention_dropout)
        self.cross_attn = MultiHeadAttention(embed_dim, num_heads, attention_dropout)
        self.feed_forward = PositionwiseFeedForward(embed_dim, ffn_dim, dropout, activation)
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
        x, _ = self._sublayer(x, 0, lambda h: self.self_attn(h, h, self_mask))
        x, weights = self._sublayer(
            x, 1, lambda h: self.cross_attn(h, memory, src_mask, need_weights)
        )
        x, _ = self._sublayer(x, 2, lambda h: (self.feed_forward(h), None))
        return x, weights
