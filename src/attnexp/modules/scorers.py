"""Attention scorers: score each item (key) against a query.

Every scorer maps keys (B, T, Dk) and a query (B, Dq) to raw scores (B, T). A new scorer is one
subclass here plus one `conf/scorer/<name>.yaml` whose `_target_` names it (with `_partial_: true`:
the model supplies `key_dim` and `query_dim`, which only it knows).
"""

import math

import torch
from torch import nn


class Scorer(nn.Module):
    """Base class. `needs_query` is False for scorers that look at the items alone."""

    needs_query = True

    def __init__(self, key_dim: int, query_dim: int) -> None:
        super().__init__()
        self.key_dim = key_dim
        self.query_dim = query_dim

    def forward(self, keys: torch.Tensor, query: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError


def _require_equal_dims(name: str, key_dim: int, query_dim: int) -> None:
    if key_dim != query_dim:
        raise ValueError(
            f"{name} needs key and query of the same size, got key_dim={key_dim} and "
            f"query_dim={query_dim} (AdditiveScorer and BilinearScorer take different sizes)"
        )


class AdditiveScorer(Scorer):
    """Bahdanau: v^T tanh(W k + U q)."""

    def __init__(self, key_dim: int, query_dim: int, attn_dim: int | None = None) -> None:
        super().__init__(key_dim, query_dim)
        attn_dim = key_dim if attn_dim is None else attn_dim
        self.key_proj = nn.Linear(key_dim, attn_dim, bias=False)
        self.query_proj = nn.Linear(query_dim, attn_dim, bias=True)
        self.v = nn.Linear(attn_dim, 1, bias=False)

    def forward(self, keys: torch.Tensor, query: torch.Tensor | None) -> torch.Tensor:
        hidden = torch.tanh(self.key_proj(keys) + self.query_proj(query).unsqueeze(1))  # (B, T, A)
        return self.v(hidden).squeeze(-1)  # (B, T)


class DotScorer(Scorer):
    """Luong dot: k . q."""

    def __init__(self, key_dim: int, query_dim: int) -> None:
        super().__init__(key_dim, query_dim)
        _require_equal_dims(type(self).__name__, key_dim, query_dim)

    def forward(self, keys: torch.Tensor, query: torch.Tensor | None) -> torch.Tensor:
        return torch.einsum("bth,bh->bt", keys, query)


class ScaledDotScorer(DotScorer):
    """Vaswani: k . q / sqrt(d).

    Args:
        learn_scale: learn the scale, started at 1 / sqrt(d) (kept as its log, so it stays
            positive): the softmax may then grow sharper than the fixed scale lets it. On bags
            of digits the fixed scale leaves the attention almost uniform (docs/results.md).
    """

    def __init__(self, key_dim: int, query_dim: int, learn_scale: bool = False) -> None:
        super().__init__(key_dim, query_dim)
        self.scale = 1.0 / math.sqrt(key_dim)
        self.log_scale = nn.Parameter(torch.tensor(math.log(self.scale))) if learn_scale else None

    def forward(self, keys: torch.Tensor, query: torch.Tensor | None) -> torch.Tensor:
        scale = self.scale if self.log_scale is None else self.log_scale.exp()
        return super().forward(keys, query) * scale


class BilinearScorer(Scorer):
    """Luong general: k^T W q.

    Args:
        identity_init: start W at I / sqrt(d) plus small noise (needs key_dim == query_dim), so the
            scorer starts as a scaled dot product instead of a random projection.
    """

    def __init__(self, key_dim: int, query_dim: int, identity_init: bool = False) -> None:
        super().__init__(key_dim, query_dim)
        self.weight = nn.Parameter(torch.empty(key_dim, query_dim))
        if identity_init:
            _require_equal_dims("BilinearScorer with identity_init", key_dim, query_dim)
            with torch.no_grad():
                self.weight.copy_(torch.eye(key_dim) / math.sqrt(key_dim))
                self.weight.add_(0.01 * torch.randn_like(self.weight))
        else:
            nn.init.xavier_uniform_(self.weight)

    def forward(self, keys: torch.Tensor, query: torch.Tensor | None) -> torch.Tensor:
        return torch.einsum("bth,hq,bq->bt", keys, self.weight, query)


class SimpleScorer(Scorer):
    """Context-free score network: w^T tanh(W k), no query (the book's "simple" attention)."""

    needs_query = False

    def __init__(self, key_dim: int, query_dim: int = 0, attn_dim: int | None = None) -> None:
        super().__init__(key_dim, query_dim)
        attn_dim = key_dim if attn_dim is None else attn_dim
        self.net = nn.Sequential(nn.Linear(key_dim, attn_dim), nn.Tanh(), nn.Linear(attn_dim, 1))

    def forward(self, keys: torch.Tensor, query: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(keys).squeeze(-1)  # (B, T)
