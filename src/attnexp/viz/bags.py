"""Sample bags with each digit's attention weight drawn on it."""

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure


def plot_bag_attention(
    images: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor | None,
    labels: torch.Tensor,
    preds: torch.Tensor,
) -> Figure:
    """images (B, T, S, S), mask (B, T), weights (B, T) or None -> a B x T grid of digits."""
    images, mask, labels, preds = (t.detach().float().cpu() for t in (images, mask, labels, preds))
    B, T = mask.shape
    fig, axes = plt.subplots(B, T, figsize=(1.3 * T, 1.5 * B), squeeze=False)
    for b in range(B):
        for t in range(T):
            ax = axes[b, t]
            ax.set_xticks([]), ax.set_yticks([])
            if not mask[b, t]:
                ax.axis("off")
                continue
            weight = float(weights[b, t]) if weights is not None else None
            ax.imshow(images[b, t], cmap="gray")
            if weight is not None:
                # A red frame whose thickness grows with the weight makes the attended digit pop.
                for spine in ax.spines.values():
                    spine.set_edgecolor("red")
                    spine.set_linewidth(0.5 + 4 * weight)
                ax.set_title(f"{weight:.2f}", fontsize=8)
        axes[b, 0].set_ylabel(f"y={int(labels[b])} p={int(preds[b])}", fontsize=8)
    fig.tight_layout()
    return fig
