"""Tiny classifiers whose faithful explanation is known, for the faithfulness tests.

Shapes: B bags, T items, D = 4 features per item. Feature 0 marks an item for the scorer,
feature 1 is the evidence the head reads, features 2.. are noise nothing reads.
"""

import torch
from torch import nn

from attnexp.models.output import ModelOutput
from attnexp.modules import AttentionPooling, Scorer

D = 4


class MarkerScorer(Scorer):
    """Scores an item by its feature 0 times `sharpness` (0: every item alike, uniform weights)."""

    needs_query = False

    def __init__(self, sharpness: float) -> None:
        super().__init__(D, 0)
        self.sharpness = sharpness

    def forward(self, keys: torch.Tensor, query: torch.Tensor | None = None) -> torch.Tensor:
        return self.sharpness * keys[..., 0]  # (B, T)


class PooledBagModel(nn.Module):
    """Attention pooling by `MarkerScorer`, then logits (x1, -x1) of the pooled feature 1: with a
    sharp scorer it reads the marked item only."""

    input_kind = "bags"

    def __init__(self, sharpness: float) -> None:
        super().__init__()
        self.pool = AttentionPooling(D, MarkerScorer(sharpness), query="none")

    def forward(
        self, items: torch.Tensor, mask: torch.Tensor, return_attention: bool = False
    ) -> ModelOutput:
        pooled, weights = self.pool(items, mask)  # (B, D), (B, T)
        logits = torch.stack([pooled[:, 1], -pooled[:, 1]], dim=1)  # (B, 2)
        return ModelOutput(logits, weights if return_attention else None)


def marked_bags(
    batch: int = 6, size: int = 5, seed: int = 0
) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """(inputs, labels, marked position): one marked item per bag, at a random position, whose
    evidence (+-3) decides the class against each other item's weaker opposite evidence (which
    together outweighs it: weighted alike, the items give the other class)."""
    g = torch.Generator().manual_seed(seed)
    items = torch.randn(batch, size, D, generator=g)
    items[..., 0] = 0.0
    sign = torch.where(torch.rand(batch, generator=g) < 0.5, -1.0, 1.0)  # (B,)
    marked = torch.randint(0, size, (batch,), generator=g)
    items[..., 1] = -sign[:, None] * (0.8 + torch.rand(batch, size, generator=g))
    rows = torch.arange(batch)
    items[rows, marked, 0] = 1.0
    items[rows, marked, 1] = 3.0 * sign
    labels = (sign < 0).long()  # class 0: x1 > 0
    mask = torch.ones(batch, size, dtype=torch.bool)
    return {"items": items, "mask": mask}, labels, marked


class PooledTokenModel(nn.Module):
    """`PooledBagModel` over tokens: a fixed embedding (token 1: marked, evidence +3; token 2:
    marked, -3; token 3: +1; token 4: -1; 0: padding, zeros) then the same pooling and head."""

    input_kind = "tokens"

    def __init__(self, sharpness: float) -> None:
        super().__init__()
        self.embedding = nn.Embedding(5, D, padding_idx=0)
        table = torch.zeros(5, D)
        table[1, :2] = torch.tensor([1.0, 3.0])
        table[2, :2] = torch.tensor([1.0, -3.0])
        table[3, 1], table[4, 1] = 1.0, -1.0
        self.embedding.weight.data.copy_(table)
        self.bags = PooledBagModel(sharpness)

    def forward(
        self, input_ids: torch.Tensor, mask: torch.Tensor, return_attention: bool = False
    ) -> ModelOutput:
        return self.bags(self.embedding(input_ids), mask, return_attention)


def marked_texts() -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """(inputs, labels, marked position): each text one marked token among four that oppose it,
    then padding."""
    input_ids = torch.tensor(
        [[4, 1, 4, 4, 4, 0], [3, 3, 2, 3, 3, 0], [1, 4, 4, 4, 4, 0], [3, 3, 3, 3, 2, 0]]
    )
    labels = torch.tensor([0, 1, 0, 1])  # class 0: the marked token's evidence is positive
    return {"input_ids": input_ids, "mask": input_ids != 0}, labels, torch.tensor([1, 2, 0, 4])


class MarkedTranslator(nn.Module):
    """An encoder-decoder whose every target step reads one marked source token: the table of
    `PooledTokenModel` embeds the source, each step attends by `MarkerScorer` and emits token 2
    where the attended evidence is positive, 3 where it is negative (targets 0, 1: never)."""

    input_kind = "translation"

    def __init__(self, sharpness: float) -> None:
        super().__init__()
        self.embedding = PooledTokenModel(sharpness).embedding
        self.scorer = MarkerScorer(sharpness)

    def forward(self, src_ids, src_mask, tgt_in, return_attention=False) -> ModelOutput:
        from attnexp.modules.masking import masked_softmax

        memory = self.embedding(src_ids)  # (B, S, D)
        rows, steps = [], []
        for _ in range(tgt_in.shape[1]):  # one call of the scorer per step, as a decoder
            weights = masked_softmax(self.scorer(memory), src_mask)  # (B, S)
            evidence = torch.einsum("bs,bs->b", weights, memory[..., 1])  # (B,)
            low = torch.full_like(evidence, -10.0)
            steps.append(torch.stack([low, low, evidence, -evidence], dim=1))  # (B, 4)
            rows.append(weights)
        attention = torch.stack(rows, dim=1) if return_attention else None  # (B, U, S)
        return ModelOutput(torch.stack(steps, dim=1), attention)


def marked_translations() -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """(batch, marked position): `marked_texts`' sources, each with a reference of three
    tokens, all the one its marked token gives (2: positive evidence, 3: negative)."""
    inputs, labels, marked = marked_texts()
    target = torch.where(labels == 0, 2, 3)[:, None].expand(-1, 3)  # (B, 3)
    batch = {
        "src_ids": inputs["input_ids"],
        "src_mask": inputs["mask"],
        "tgt_in": torch.cat([torch.ones_like(target[:, :1]), target[:, :-1]], dim=1),
        "tgt_out": target.clone(),
        "tgt_mask": torch.ones_like(target, dtype=torch.bool),
    }
    return batch, marked
