"""Masks, masked softmax and masked mean.

One convention everywhere: a mask is a bool tensor, True = a real item that may be attended to.
"""

import torch


def lengths_to_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """(B,) lengths -> (B, T) bool mask, True on the first `length` positions."""
    max_len = int(lengths.max()) if max_len is None else max_len
    positions = torch.arange(max_len, device=lengths.device)
    return positions[None, :] < lengths[:, None]


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None, dim: int = -1) -> torch.Tensor:
    """Softmax over `dim` that gives masked positions exactly 0.

    Masked scores are filled with the dtype's smallest finite value (safe in bf16/fp16, no -inf);
    a row with no real item returns all zeros instead of NaN.

    Args:
        scores: (..., T) raw scores.
        mask: bool, broadcastable to `scores`, True = real item; None = no masking.
    Returns:
        weights with the shape of `scores`; each row sums to 1, or to 0 if it has no real item.
    """
    if mask is None:
        return torch.softmax(scores, dim=dim)
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    # An all-padding row softmaxes to a uniform row; multiplying by the mask zeroes it.
    return torch.softmax(scores, dim=dim) * mask


def masked_mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean over the time axis of the real items: (B, T, H), (B, T) -> (B, H). Zeros if none."""
    if mask is None:
        return values.mean(dim=1)
    weights = mask.to(values.dtype).unsqueeze(-1)  # (B, T, 1)
    count = weights.sum(dim=1).clamp(min=1.0)  # (B, 1)
    return (values * weights).sum(dim=1) / count


def masked_max(features: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Max over the real items: (B, T, H), (B, T) -> pooled (B, H), winner index (B, H).

    Padded items are filled with the dtype's smallest value (never chosen while a real item
    exists); a bag with no real item pools to zeros, as `masked_mean` does.
    """
    filled = features.masked_fill(~mask[:, :, None], torch.finfo(features.dtype).min)
    pooled, winners = filled.max(dim=1)  # (B, H), (B, H)
    return pooled * mask.any(dim=1, keepdim=True), winners
