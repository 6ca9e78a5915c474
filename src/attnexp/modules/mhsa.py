"""Multi-head self-attention with an explicit mask and optional weights."""

import torch
import torch.nn.functional as F
from torch import nn

from attnexp.errors import ConfigError, require_positive


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


def attendable_keys(mask: torch.Tensor) -> torch.Tensor:
    """The (B, 1, 1, S) key mask of a (B, S) mask, or the (B, 1, U, S) mask of a per-query
    (B, U, S) one (causal self-attention). A query with no real key would softmax over nothing
    (NaN or zeros, as the kernel has it); it sees all its keys instead, so its output is defined
    and finite (its positions are padding, pooled or masked away downstream)."""
    mask = mask | ~mask.any(dim=-1, keepdim=True)
    return mask[:, None, None, :] if mask.dim() == 2 else mask[:, None]


def attention_weights(
    q: torch.Tensor, k: torch.Tensor, key_mask: torch.Tensor | None, scale: float | None = None
) -> torch.Tensor:
    """softmax(scale q k^T) over the real keys, scale 1 / sqrt(hd) unless given: q (B, nh, U, hd),
    k (B, nh, S, hd), key_mask (B, 1, 1, S) or (B, 1, U, S) (`attendable_keys`) or None ->
    (B, nh, U, S). Every row must have a real key (`attendable_keys` sees to it).

    The scale and the mask (as an additive bias of the dtype's smallest value) go into the one
    matmul, so the (B, nh, U, S) scores are written once: on the CPU each further pass over them
    (scaling, masking) costs about as much as the matmul, mostly in fresh pages.
    """
    B, nh, U, hd = q.shape
    S = k.shape[2]
    rows = 1 if key_mask is None else key_mask.shape[2]  # 1: one key mask for every query
    bias = torch.zeros(B, 1, rows, S, dtype=q.dtype, device=q.device)
    if key_mask is not None:
        bias.masked_fill_(~key_mask, torch.finfo(q.dtype).min)
    bias = bias.expand(B, nh, rows, S).reshape(B * nh, rows, S)
    scores = torch.baddbmm(
        bias,
        q.reshape(B * nh, U, hd),
        k.reshape(B * nh, S, hd).transpose(1, 2),
        alpha=hd**-0.5 if scale is None else scale,
    )  # (B * nh, U, S)
    return torch.softmax(scores, dim=-1).view(B, nh, U, S)


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
        key_mask = None if mask is None else attendable_keys(mask)  # (B, 1, 1, T)
        dropout = self.dropout if self.training else 0.0
        if need_weights:
            weights = attention_weights(q, k, key_mask)  # (B, nh, T, T)
            out = F.dropout(weights, p=dropout, training=self.training) @ v  # (B, nh, T, hd)
        else:
            weights = None
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask, dropout_p=dropout)
        out = out.transpose(1, 2).reshape(B, T, E)  # (B, T, E)
        return self.out_proj(out), weights


class SimpleSelfAttention(nn.Module):
    """Parameter-free self-attention softmax(X X^T) X over the real tokens (one head).

    Same interface as `MultiHeadSelfAttention`, as one head whose query, key and value are x,
    unscaled: the weights (B, 1, T, T) come only when asked for, else the fused kernel runs.
    """

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, E), mask (B, T) -> out (B, T, E), weights (B, 1, T, T) or None."""
        x = x[:, None]  # (B, 1, T, E)
        key_mask = attendable_keys(mask)  # (B, 1, 1, T)
        if need_weights:
            weights = attention_weights(x, x, key_mask, scale=1.0)  # (B, 1, T, T)
            out = weights @ x
        else:
            weights = None
            out = F.scaled_dot_product_attention(x, x, x, attn_mask=key_mask, scale=1.0)
        return out.squeeze(1), weights
