"""Attention pooling: a weighted sum of items, weights from a scorer and a query."""

from collections.abc import Callable

import torch
from torch import nn

from attnexp.modules.masking import masked_mean, masked_softmax
from attnexp.modules.scorers import Scorer

QUERIES = ("learned", "mean", "none")
# How a learned query starts: "normal" N(0, 1/H) | "uniform" U(-0.5, 0.5), the nndl chapter's.
QUERY_INITS = ("normal", "uniform")


class AttentionPooling(nn.Module):
    """Pool (B, T, H) items into (B, H) with attention weights (B, T).

    Args:
        dim: item size H.
        scorer: a scorer factory called as `scorer(key_dim=H, query_dim=H)`, or a built Scorer.
        query: "learned" (a trained task vector), "mean" (the masked mean of the items: a context
            vector) or "none" (for scorers that need no query, e.g. SimpleScorer).
        query_init: start of a learned query: "normal" (N(0, 1/H)) or "uniform" (U(-0.5, 0.5),
            as the nndl chapter's attention models: std 0.29, 4.6x larger at H = 256, so the first
            weights are sharper).
    """

    def __init__(
        self,
        dim: int,
        scorer: Callable[..., Scorer] | Scorer,
        query: str = "learned",
        query_init: str = "normal",
    ):
        super().__init__()
        if query not in QUERIES:
            raise ValueError(f"query='{query}' is not one of {', '.join(QUERIES)}")
        if query_init not in QUERY_INITS:
            raise ValueError(f"query_init='{query_init}' is not one of {', '.join(QUERY_INITS)}")
        self.scorer = scorer if isinstance(scorer, Scorer) else scorer(key_dim=dim, query_dim=dim)
        if self.scorer.needs_query and query == "none":
            raise ValueError(
                f"{type(self.scorer).__name__} needs a query: query='none' must be learned or mean"
            )
        self.query_kind = query
        self.query = None
        if query == "learned":
            self.query = nn.Parameter(
                torch.randn(dim) / dim**0.5
                if query_init == "normal"
                else torch.empty(dim).uniform_(-0.5, 0.5)
            )

    def forward(
        self, items: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """items (B, T, H), mask (B, T) -> pooled (B, H), weights (B, T)."""
        B = items.shape[0]
        if self.query_kind == "learned":
            query = self.query.expand(B, -1)  # (B, H)
        elif self.query_kind == "mean":
            query = masked_mean(items, mask)  # (B, H)
        else:
            query = None
        weights = masked_softmax(self.scorer(items, query), mask)  # (B, T)
        pooled = torch.einsum("bt,bth->bh", weights, items)
        return pooled, weights
