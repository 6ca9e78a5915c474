"""A classifier under test: its forward as probabilities, the items it ranks, and those items
removed (erased) or its attention weights replaced.

Shapes: B examples, T positions (items of a bag, tokens of a text or a pair), C classes.
`inputs` is the model's keyword batch (`mask` (B, T) True on real positions); every tensor whose
first two dims are (B, T) is per position.
"""

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from attnexp.faithfulness.override import WeightOverride, replaceable_layer, weights_replaced

INPUT_KINDS = ("bags", "tokens", "pairs")


class Subject:
    """A trained classifier (put in eval mode) read as the measures need it.

    Args:
        model: a network returning `ModelOutput` with logits (B, C), taking `return_attention`.
        input_kind: "bags" (items (B, T, ...) are ranked), "tokens" or "pairs" (the tokens of
            `input_ids` are ranked through the model's token embedding).
    """

    def __init__(self, model: nn.Module, input_kind: str) -> None:
        if input_kind not in INPUT_KINDS:
            raise ValueError(f"input_kind '{input_kind}' is not one of {', '.join(INPUT_KINDS)}")
        self.model = model.eval()
        self.input_kind = input_kind
        # Where one layer makes the weights, they can be replaced (permutation, uniform).
        self.attention_layer = replaceable_layer(model)

    @property
    def ranked_key(self) -> str:
        return "items" if self.input_kind == "bags" else "input_ids"

    def embedding(self) -> nn.Embedding:
        """The token embedding: the model's first `nn.Embedding` (the text models register it
        before any other table: segments, positions, exact-match)."""
        for module in self.model.modules():
            if isinstance(module, nn.Embedding):
                return module
        raise ValueError(f"{type(self.model).__name__} has no nn.Embedding to attribute to")

    def probabilities(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B, C) class probabilities."""
        return torch.softmax(self.model(**inputs).logits.float(), dim=-1)

    def attention(self, inputs: dict[str, torch.Tensor]):
        """(probabilities (B, C), the model's attention in its own form)."""
        out = self.model(**inputs, return_attention=True)
        return torch.softmax(out.logits.float(), dim=-1), out.attention

    def removable(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B, T) the positions that may be erased: the real ones, but for a pair its [CLS]
        (position 0) and each segment's closing [SEP] (the last real token of a segment)."""
        mask = inputs["mask"]
        if self.input_kind != "pairs":
            return mask.clone()
        segments = inputs["segment_ids"]
        following = torch.cat([segments[:, 1:], segments.new_full((len(mask), 1), -1)], dim=1)
        next_real = torch.cat([mask[:, 1:], mask.new_zeros(len(mask), 1)], dim=1)
        closing = mask & ((following != segments) | ~next_real)
        opening = torch.zeros_like(mask)
        opening[:, 0] = True
        return mask & ~closing & ~opening

    def baseline(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """What an erased position is replaced by for integrated gradients: an empty slot (zeros)
        for a bag, the padding token for a text (a pair's [CLS] and [SEP] are kept)."""
        ranked = inputs[self.ranked_key]
        if self.input_kind == "bags":
            return torch.zeros_like(ranked)
        pad = self.embedding().padding_idx
        return torch.where(self.removable(inputs), pad if pad is not None else 0, ranked)

    @contextmanager
    def weights_replaced(self, override: WeightOverride) -> Iterator[None]:
        """Within the block, the model's attention layer uses `override(weights, mask)` in place
        of its weights (see `attnexp.faithfulness.override`)."""
        if self.attention_layer is None:
            raise ValueError(
                f"{type(self.model).__name__} has no single attention layer whose weights can be "
                f"replaced"
            )
        with weights_replaced(self.attention_layer, override):
            yield


def erase(inputs: dict[str, torch.Tensor], drop: torch.Tensor) -> dict[str, torch.Tensor]:
    """The inputs with the `drop` (B, T) positions deleted: the kept positions move to the front
    in their order, the rest become padding (mask False), the length T stays."""
    mask = inputs["mask"]
    B, T = mask.shape
    order = torch.argsort(drop.to(torch.int8), dim=1, stable=True)  # (B, T): kept first
    out = {}
    for key, value in inputs.items():
        if torch.is_tensor(value) and value.shape[:2] == (B, T):
            index = order.reshape(B, T, *([1] * (value.dim() - 2))).expand_as(value)
            out[key] = value.gather(1, index)
        else:
            out[key] = value
    out["mask"] = (mask & ~drop).gather(1, order)
    return out


def repeat_rows(inputs: dict[str, torch.Tensor], times: int) -> dict[str, torch.Tensor]:
    """Each example `times` times in a row: (B, ...) -> (B * times, ...)."""
    return {
        k: v.repeat_interleave(times, dim=0) if torch.is_tensor(v) else v for k, v in inputs.items()
    }
