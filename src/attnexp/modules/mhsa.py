"""Multi-head self-attention with an explicit mask and optional weights."""

import torch
import torch.nn.functional as F
from torch import nn

from attnexp.errors import ConfigError, require_positive
from attnexp.modules.masking import masked_softmax


def check_heads(width: int, num_heads: int, sized_by: str = "model.hidden_size") -> None:
    """Each of nh heads gets width / nh features: nh must be a positive divisor of the width.

    `sized_by` is the setting that decides the width, named in the message as the other fix.
    """
    require_positive("model.heads", num_heads)
    if width % num_heads:
        raise ConfigError(
            f"feature size {width} is not divisible by model.heads={num_heads} "
            f"(set model.heads to a divisor of {width}, or change {sized_by})"
        )


class MultiHeadSelfAttention(nn.Module):
    """Self-attention over (B, T, E) with nh heads of size hd = E / nh.

    Parameter layout matches `nn.MultiheadAttention` (`in_proj_weight` (3E, E), `out_proj`), so
    weights copy across. Without `need_weights` it runs `F.scaled_dot_product_attention`.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        check_heads(embed_dim, num_heads)
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


class SimpleSelfAttention(nn.Module):
    """Parameter-free self-attention softmax(X X^T) X over the real tokens (one head).

    Same interface as `MultiHeadSelfAttention`; the weights (B, 1, T, T) come only when asked for.
    """

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, E), mask (B, T) -> out (B, T, E), weights (B, 1, T, T) or None."""
        scores = x @ x.transpose(1, 2)  # (B, T, T)
        weights = masked_softmax(scores, mask[:, None, :])  # keys masked
        return weights @ x, weights.unsqueeze(1) if need_weights else None
