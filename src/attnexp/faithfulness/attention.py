"""Attention as one importance per position, from each form a model returns it in.

- pooling weights (B, T): as they are ("attention");
- self-attention weights (B, nh, T, T) read by a mean over the tokens (the BiLSTM + MHSA and
  self-attention classifiers): what each token receives, averaged over the real queries, per
  head ("head<h>") and over the heads ("attention");
- one (B, nh, T, T) per layer of an encoder read at its first token ([CLS], the Transformer
  matcher): the last layer's [CLS] row per head and averaged ("attention"), each layer's
  averaged ("layer<l>", from 1), and attention rollout over the layers ("rollout", Abnar &
  Zuidema 2020).

Shapes: B examples, nh heads, T positions, L layers.
"""

import torch

# The map the summaries lead with, in the order they are looked for.
MAIN_MAPS = ("attention", "rollout")


def attention_maps(attention, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """{name: (B, T)} importances, zero on padding; {} for a model without attention."""
    if attention is None:
        return {}
    if isinstance(attention, list | tuple):
        layers = [a.float() for a in attention]
        maps = {"attention": layers[-1][:, :, 0].mean(dim=1) * mask}  # (B, T)
        if layers[-1].shape[1] > 1:
            maps |= {f"head{h}": layers[-1][:, h, 0] * mask for h in range(layers[-1].shape[1])}
        if len(layers) > 1:  # each layer's [CLS] row, heads averaged (the last is "attention")
            maps |= {f"layer{i}": a[:, :, 0].mean(dim=1) * mask for i, a in enumerate(layers, 1)}
        maps["rollout"] = rollout(layers)[:, 0] * mask
        return maps
    attention = attention.float()
    if attention.dim() == 2:
        return {"attention": attention * mask}
    if attention.dim() == 4:
        received = received_attention(attention, mask)  # (B, nh, T)
        maps = {"attention": received.mean(dim=1)}
        if received.shape[1] > 1:
            maps |= {f"head{h}": received[:, h] for h in range(received.shape[1])}
        return maps
    raise ValueError(
        f"attention of shape {tuple(attention.shape)}: expected (B, T), (B, nh, T, T) or a list "
        f"of (B, nh, T, T)"
    )


def received_attention(weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """weights (B, nh, T, T), mask (B, T) -> (B, nh, T): the weight each key gets, averaged over
    the real queries (what a mean over the attended tokens passes on from it)."""
    queries = mask[:, None, None, :].to(weights.dtype)  # (B, 1, 1, T)
    received = (queries @ weights).squeeze(2) / queries.sum(-1).clamp(min=1.0)  # (B, nh, T)
    return received * mask[:, None, :]


def rollout(layers: list[torch.Tensor]) -> torch.Tensor:
    """Attention rollout: per layer the head-mean weights plus the residual identity, rows
    renormalised, multiplied from the first layer up. layers: L x (B, nh, T, T) -> (B, T, T),
    row i: how much of the last layer's position i comes from each input position."""
    B, _, T, _ = layers[0].shape
    eye = torch.eye(T, dtype=layers[0].dtype, device=layers[0].device)
    flow = eye.expand(B, T, T)
    for weights in layers:
        mixed = 0.5 * weights.mean(dim=1) + 0.5 * eye  # (B, T, T)
        mixed = mixed / mixed.sum(dim=-1, keepdim=True)
        flow = mixed @ flow
    return flow
