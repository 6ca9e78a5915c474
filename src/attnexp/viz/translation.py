"""Target-over-source attention of a translation model as heatmaps (one panel per sentence)."""

import math
from collections.abc import Sequence

import torch
from matplotlib.figure import Figure


def alignment_figure(
    sources: Sequence[Sequence[str]],
    targets: Sequence[Sequence[str]],
    attention: torch.Tensor,
    columns: int = 4,
) -> Figure:
    """Panel i: `attention[i]` (U, S) cut to the sentence's target rows x source columns.

    sources[i], targets[i]: the tokens along the x and y axes (target: what each step emits).
    """
    attention = attention.detach().float().cpu()
    rows = math.ceil(len(sources) / columns)
    figure = Figure(figsize=(3.2 * columns, 3.0 * rows), layout="constrained")
    for i, (src, tgt) in enumerate(zip(sources, targets, strict=True)):
        axes = figure.add_subplot(rows, columns, i + 1)
        axes.imshow(attention[i, : len(tgt), : len(src)], cmap="Blues", vmin=0.0, vmax=1.0)
        axes.set_xticks(range(len(src)), src, rotation=90, fontsize=7)
        axes.set_yticks(range(len(tgt)), tgt, fontsize=7)
    return figure
