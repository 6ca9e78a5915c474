"""Multi-head self-attention with an explicit mask and optional weights."""

import torch
import torch.nn.functional as F
from torch import nn

from attnexp.errors import ConfigError
from attnexp.modules.masking import masked_softmax


class MultiHeadSelfAttention(nn.Module):
    """Self-attention over (B, T, E) with nh heads of size hd = E / nh.

    Parameter layout matches `nn.MultiheadAttention` (`in_proj_weight` (3E, E), `out_proj`), so
    weights copy across. Without `need_weights` it runs `F.scaled_dot_product_attention`.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if num_heads < 1 or embed_dim % num_heads != 0:
            raise ConfigError(
                f"hidden size {embed_dim} is not divisible by heads={num_heads}: each head gets "
                f"hidden/heads features (set model.heads to a divisor of {embed_dim})"
            )
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.in_proj = nn.Linear(embed_dim, 3 * embed_dim, bias=bias)
        self.in_proj.fused_parts = 3  # query, key, value (see modules/init.py)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, E), mask (B, T) -> out (B, T, E), weights (B, nh, T, T) or None."""
        B, T, E = x.shape
        q, k, v = self.in_proj(x).split(E, dim=-1)  # 3 x (B, T, E)
        q, k, v = (t.view(B, T, self.num_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        # q, k, v: (B, nh, T, hd)
        key_mask = None
        if mask is not None:
            # A sequence with no real token would softmax over nothing; let it see all keys so the
            # output stays finite (its positions are padding and get pooled away downstream).
            mask = mask | ~mask.any(dim=1, keepdim=True)
            key_mask = mask[:, None, None, :]  # (B, 1, 1, T)
        dropout = self.dropout if self.training else 0.0
        if need_weights:
            scores = q @ k.transpose(-2, -1) / self.head_dim**0.5  # (B, nh, T, T)
            weights = masked_softmax(scores, key_mask)
            out = F.dropout(weights, p=dropout, training=self.training) @ v  # (B, nh, T, hd)
        else:
            weights = None
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask, dropout_p=dropout)
        out = out.transpose(1, 2).reshape(B, T, E)  # (B, T, E)
        return self.out_proj(out), weights
