"""Does attention explain? Faithfulness measures of a trained classifier's attention: rank
agreement with gradients, integrated gradients and leave-one-out; permutation, uniform weights
and erasure; and, on bags, the ground truth. An encoder-decoder's cross-attention is measured per
(sentence, target token) pair (`translation`, `translation_measures`). Plain torch over the
model's forward (captum for the gradients): no Lightning, no Hydra."""

from attnexp.faithfulness.attention import attention_maps, rollout
from attnexp.faithfulness.explainer import (
    METHODS,
    Settings,
    concatenate,
    explain_batch,
    summarise_columns,
)
from attnexp.faithfulness.subject import Subject, erase

__all__ = [
    "METHODS",
    "Settings",
    "Subject",
    "attention_maps",
    "concatenate",
    "erase",
    "explain_batch",
    "rollout",
    "summarise_columns",
]
