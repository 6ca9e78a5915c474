"""Framework-free attention building blocks (no Lightning, no Hydra)."""

from attnexp.modules.masking import lengths_to_mask, masked_mean, masked_softmax
from attnexp.modules.mhsa import MultiHeadAttention, SimpleSelfAttention
from attnexp.modules.pooling import AttentionPooling
from attnexp.modules.scorers import (
    AdditiveScorer,
    BilinearScorer,
    DotScorer,
    ScaledDotScorer,
    Scorer,
    SimpleScorer,
)

__all__ = [
    "AdditiveScorer",
    "AttentionPooling",
    "BilinearScorer",
    "DotScorer",
    "MultiHeadAttention",
    "ScaledDotScorer",
    "Scorer",
    "SimpleScorer",
    "SimpleSelfAttention",
    "lengths_to_mask",
    "masked_mean",
    "masked_softmax",
]
