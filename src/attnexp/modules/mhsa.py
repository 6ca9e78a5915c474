"""Multi-head attention (self- and cross-) with an explicit mask and optional weights."""

import torch
import torch.nn.functional as F
from torch import nn


def check_heads(embed_dim: int, num_heads: int) -> None:
    """Each of nh heads gets embed_dim / nh features: nh must be a positive divisor of it."""
    if num_heads < 1 or embed_dim % num_heads:
        raise ValueError(
            f"num_heads={num_heads} must be a positive divisor of embed_dim={embed_dim}"
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


class MultiHeadAttention(nn.Module):
    """Queries (B, U, E) attend over keys and values (B, S, E) with nh heads of size hd = E / nh:
    self-attention (no `memory`: S = U, keys and values from the queries) or cross-attention
    over a `memory`. The mask is a key mask (B, S) or a per-query mask (B, U, S).

    `fused_qkv=True` projects query, key and value with one `in_proj` (3E, E), the layout of
    `nn.MultiheadAttention` (`in_proj_weight`, `out_proj`), so weights copy across; it serves
    self-attention only. `fused_qkv=False` projects the query with `q_proj` (E, E) and key and
    value with `kv_proj` (2E, E): what cross-attention needs, since query and memory differ.
    Without `need_weights` it runs `F.scaled_dot_product_attention`; with it, the explicit softmax
    of `attention_weights` (padded keys get weight 0). A query with no real key sees all its keys
    (`attendable_keys`), in both paths.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        fused_qkv: bool = True,
    ) -> None:
        super().__init__()
        check_heads(embed_dim, num_heads)
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.fused_qkv = fused_qkv
        if fused_qkv:
            self.in_proj = nn.Linear(embed_dim, 3 * embed_dim, bias=bias)
            self.in_proj.fused_parts = 3  # query, key, value (see modules/init.py)
        else:
            self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
            self.kv_proj = nn.Linear(embed_dim, 2 * embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def _project(
        self, query: torch.Tensor, memory: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> q (B, U, E), k and v (B, S, E)."""
        E = self.embed_dim
        if self.fused_qkv:
            if memory is not None:
                raise ValueError("fused_qkv=True projects self-attention only: memory must be None")
            return self.in_proj(query).split(E, dim=-1)
        k, v = self.kv_proj(query if memory is None else memory).split(E, dim=-1)
        return self.q_proj(query), k, v

    def forward(
        self,
        query: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
        memory: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """query (B, U, E), mask (B, S) or (B, U, S) or None, memory (B, S, E) or None
        (self-attention: S = U) -> out (B, U, E), weights (B, nh, U, S) or None."""
        B, U, E = query.shape
        q, k, v = self._project(query, memory)  # (B, U, E), 2 x (B, S, E)
        S = k.shape[1]
        q = q.view(B, U, self.num_heads, self.head_dim).transpose(1, 2)  # (B, nh, U, hd)
        k, v = (t.view(B, S, self.num_heads, self.head_dim).transpose(1, 2) for t in (k, v))
        # k, v: (B, nh, S, hd)
        key_mask = None if mask is None else attendable_keys(mask)  # (B, 1, 1|U, S)
        dropout = self.dropout if self.training else 0.0
        if need_weights:
            weights = attention_weights(q, k, key_mask)  # (B, nh, U, S)
            out = F.dropout(weights, p=dropout, training=self.training) @ v  # (B, nh, U, hd)
        else:
            weights = None
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask, dropout_p=dropout)
        return self.out_proj(out.transpose(1, 2).reshape(B, U, E)), weights  # (B, U, E)


class SimpleSelfAttention(nn.Module):
    """Parameter-free self-attention softmax(X X^T) X over the real tokens (one head).

    Same interface as `MultiHeadAttention`'s self-attention, as one head whose query, key and value are x,
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
