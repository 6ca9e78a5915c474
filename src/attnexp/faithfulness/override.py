"""Replacing a model's attention weights at test time. A forward hook on the model's one
attention layer (an attention pooling, or a self-attention layer) recomputes the layer's output
under other weights: the weighted sum of its items, or of its values.

Shapes: B examples, T positions, nh heads, hd head size, E = nh * hd features.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from attnexp.modules import AttentionPooling
from attnexp.modules.mhsa import (
    MultiHeadAttention,
    SimpleSelfAttention,
    attendable_keys,
    attention_weights,
)

# weights (N, T), mask (N, T) True on the positions they may fall on -> the weights used (N, T)
WeightOverride = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
LAYERS = (AttentionPooling, MultiHeadAttention, SimpleSelfAttention)


def replaceable_layer(model: nn.Module) -> nn.Module | None:
    """The model's attention layer whose weights can be replaced: its only one, or None (no
    attention, or several layers, as a stacked encoder has)."""
    layers = [m for m in model.modules() if isinstance(m, LAYERS)]
    return layers[0] if len(layers) == 1 else None


def _pooled(layer, args, kwargs, output, override: WeightOverride):
    items = args[0]  # (B, T, H)
    mask = args[1] if len(args) > 1 else kwargs.get("mask")
    weights = override(output[1], mask)  # (B, T)
    return torch.einsum("bt,bth->bh", weights, items), weights


def _self_attended(layer, args, kwargs, output, override: WeightOverride):
    """The layer's forward again (as `MultiHeadAttention` / `SimpleSelfAttention` compute
    it, without dropout), each query's row of weights replaced."""
    x = args[0]  # (B, T, E)
    mask = args[1] if len(args) > 1 else kwargs.get("mask")
    B, T, E = x.shape
    key_mask = attendable_keys(mask)  # (B, 1, 1, T)
    if isinstance(layer, MultiHeadAttention):
        q, k, v = layer.in_proj(x).split(E, dim=-1)  # 3 x (B, T, E)
        q, k, v = (t.view(B, T, layer.num_heads, -1).transpose(1, 2) for t in (q, k, v))
        weights = attention_weights(q, k, key_mask)  # (B, nh, T, T)
    else:
        v = x[:, None]  # (B, 1, T, E): one head whose query, key and value are x
        weights = attention_weights(v, v, key_mask, scale=1.0)  # (B, 1, T, T)
    nh = weights.shape[1]
    rows = key_mask.expand(B, nh, T, T).reshape(-1, T)  # (B * nh * T, T)
    weights = override(weights.reshape(-1, T), rows).view(B, nh, T, T)
    out = weights @ v  # (B, nh, T, hd)
    if isinstance(layer, MultiHeadAttention):
        return layer.out_proj(out.transpose(1, 2).reshape(B, T, E)), weights
    return out.squeeze(1), weights


@contextmanager
def weights_replaced(layer: nn.Module, override: WeightOverride) -> Iterator[None]:
    """Within the block, `layer` (`replaceable_layer`) uses `override(weights, mask)` in place
    of its weights: a pooling's (B, T) rows, or each query's row of a self-attention."""
    recompute = _pooled if isinstance(layer, AttentionPooling) else _self_attended

    def hook(module, args, kwargs, output):
        return recompute(module, args, kwargs, output, override)

    handle = layer.register_forward_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()
