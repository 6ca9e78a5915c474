"""What a predictor's `predict_batch` gives predict (attnexp.runner.predict) for a batch of raw
examples: each example's result fields, and what its figures read."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn


@dataclass
class BatchAnswer:
    """fields: per example, what its row of predictions.jsonl says (label, probability and
    probabilities of a classifier; translation, score and n-best of a translation model).
    scores: what `prediction_figures` titles the figures with (class probabilities (B, C), or the
    translations). attention: what `prediction_attention` and `prediction_figures` read; None for
    a model without attention."""

    fields: list[dict]
    scores: Any
    attention: Any


def classify_batch(model: nn.Module, batch: dict, label_of: Callable[[int], str]) -> BatchAnswer:
    """A classifier's answer: each example's most probable label, its probability, and all."""
    output = model(**batch, return_attention=True)
    probs = output.logits.float().softmax(-1).cpu()  # (B, C)
    fields = []
    for row in probs:
        label = int(row.argmax())
        fields.append(
            {
                "label": label_of(label),
                "probability": round(float(row[label]), 4),
                "probabilities": [round(float(p), 4) for p in row],
            }
        )
    return BatchAnswer(fields, probs, output.attention)
