"""The faithfulness measures, per example, each against an attention ranking.

- rank agreement: Kendall's tau-b and the top-k overlap between two importances over the real
  positions (Jain & Wallace 2019);
- permutation: the weights shuffled over the real positions, K times (Jain & Wallace 2019);
- uniform weights: every real position weighted 1/n (Wiegreffe & Pinter 2019);
- erasure: positions removed in the order of an importance until the decision flips (Serrano &
  Smith 2019);
- the ground truth of a bag: whether the top-ranked item carries the label.

Shapes: B examples, T positions. NaN marks an example a measure does not apply to (fewer than two
positions to rank); `summarise` counts and leaves those out.
"""

import math

import torch

from attnexp.faithfulness.subject import Subject, erase, repeat_rows


def kendall_tau(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) Kendall's tau-b of a and b (B, T) over the real positions; NaN with fewer than two,
    or where either ranks every position alike."""
    pairs = mask[:, :, None] & mask[:, None, :]  # (B, T, T)
    pairs = pairs & torch.ones_like(pairs[0]).triu(diagonal=1)  # each pair once
    da = torch.sign(a[:, :, None] - a[:, None, :]) * pairs  # (B, T, T)
    db = torch.sign(b[:, :, None] - b[:, None, :]) * pairs
    concordance = (da * db).sum(dim=(1, 2))
    untied_a = (da != 0).sum(dim=(1, 2)).float()
    untied_b = (db != 0).sum(dim=(1, 2)).float()
    tau = concordance / (untied_a * untied_b).sqrt()
    return torch.where((untied_a > 0) & (untied_b > 0), tau, torch.nan)


def top_positions(scores: torch.Tensor, mask: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: each row's k[b] highest-scored real positions (ties: the first)."""
    order = scores.masked_fill(~mask, -torch.inf).argsort(dim=1, descending=True, stable=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(1, order, torch.arange(order.shape[1], device=order.device).expand_as(order))
    return (ranks < k[:, None]) & mask


def top_k_overlap(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor, k: int) -> torch.Tensor:
    """(B,) the share of a's top k positions that are among b's, with k at most n - 1 of the
    n real positions (so that it can miss); NaN with fewer than two."""
    n = mask.sum(dim=1)
    ks = n.clamp(max=k + 1) - 1  # (B,) k, but at most n - 1
    shared = (top_positions(a, mask, ks) & top_positions(b, mask, ks)).sum(dim=1)
    return torch.where(ks > 0, shared / ks.clamp(min=1), torch.nan)


def shuffled(weights: torch.Tensor, mask: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """weights (B, T) moved to a random order of each row's real positions (padding stays 0)."""
    noise = torch.rand(weights.shape, generator=generator, device=weights.device)
    shuffle = noise.masked_fill(~mask, 2.0).argsort(dim=1)  # real positions, shuffled, first
    real = (~mask).to(torch.int8).argsort(dim=1, stable=True)  # real positions, in order, first
    return torch.zeros_like(weights).scatter(1, real, weights.gather(1, shuffle))


def uniform(weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """1/n on each of the n real positions."""
    real = mask.to(weights.dtype)
    return real / real.sum(dim=1, keepdim=True).clamp(min=1.0)


@torch.no_grad()
def permutation(
    subject: Subject, inputs: dict[str, torch.Tensor], times: int, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """The attention weights shuffled `times` times: per example (B,) the median absolute change
    of the predicted class's probability, and the share of shuffles that change the decision."""
    probs = subject.probabilities(inputs)  # (B, C)
    pred = probs.argmax(dim=1)
    changes, flips = [], []
    with subject.weights_replaced(lambda w, m: shuffled(w, m, generator)):
        for _ in range(times):
            shuffled_probs = subject.probabilities(inputs)
            changes.append(
                (shuffled_probs.gather(1, pred[:, None]) - probs.gather(1, pred[:, None]))
                .abs()
                .squeeze(1)
            )
            flips.append((shuffled_probs.argmax(dim=1) != pred).float())
    return {
        "median_change": torch.stack(changes, dim=1).median(dim=1).values,
        "flip_share": torch.stack(flips, dim=1).mean(dim=1),
    }


@torch.no_grad()
def uniform_predictions(subject: Subject, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B,) the decision with every real position weighted alike."""
    with subject.weights_replaced(uniform):
        return subject.probabilities(inputs).argmax(dim=1)


def erasure_counts(n: torch.Tensor, steps: int) -> torch.Tensor:
    """(B, steps) how many of n positions are erased at the fractions f = 1/steps, ..., 1 of the
    n - 1 that can go (an input keeps one): ceil(f (n - 1)), at least 1; with n <= steps + 1
    every count from 1 to n - 1 is tried."""
    fractions = torch.arange(1, steps + 1, device=n.device) / steps  # (steps,)
    counts = torch.ceil(fractions[None, :] * (n[:, None] - 1) - 1e-6).long()
    return counts.clamp(min=1)


@torch.no_grad()
def erasure(
    subject: Subject,
    inputs: dict[str, torch.Tensor],
    order: torch.Tensor,
    steps: int,
) -> dict[str, torch.Tensor]:
    """Positions erased most important first (`order` (B, T): importance), more at each of
    `steps` fractions of the n erasable ones (`erasure_counts`). Per example: `fraction` (B,)
    the fraction erased when the decision first flips (NaN: it never flips, or n < 2), and
    `flipped` (B, steps) whether it has flipped by each fraction."""
    removable = subject.removable(inputs)
    n = removable.sum(dim=1)
    pred = subject.probabilities(inputs).argmax(dim=1)
    counts = erasure_counts(n, steps)  # (B, steps)
    B, T = removable.shape
    wide = repeat_rows(inputs, steps)  # (B * steps, ...)
    drop = top_positions(
        order.repeat_interleave(steps, dim=0),
        removable.repeat_interleave(steps, dim=0),
        counts.reshape(-1),
    )
    decided = subject.probabilities(erase(wide, drop)).argmax(dim=1).view(B, steps)
    return first_flips(decided, pred, n, counts)


def first_flips(
    decided: torch.Tensor, pred: torch.Tensor, n: torch.Tensor, counts: torch.Tensor
) -> dict[str, torch.Tensor]:
    """From the decisions (B, steps) after erasing `counts` (B, steps) of the n (B,) positions,
    against the original `pred` (B,): `fraction` (B,) erased when the decision first flips (NaN:
    never, or n < 2) and `flipped` (B, steps) whether it has flipped by each step."""
    flipped = (decided != pred[:, None]) & (n[:, None] > 1)
    flipped = flipped.cummax(dim=1).values  # once flipped, flipped (the counts only grow)
    first = torch.where(flipped.any(dim=1), flipped.float().argmax(dim=1), 0)
    fraction = counts.gather(1, first[:, None]).squeeze(1) / n.clamp(min=1)
    return {
        "fraction": torch.where(flipped.any(dim=1), fraction.float(), torch.nan),
        "flipped": flipped,
    }


def random_order(mask: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """(B, T) random importances: a random erasure order."""
    return torch.rand(mask.shape, generator=generator, device=mask.device)


def top_is_label(
    scores: torch.Tensor, mask: torch.Tensor, item_labels: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """(B,) whether each bag's top-scored item carries the bag's label (its largest digit)."""
    top = scores.masked_fill(~mask, -torch.inf).argmax(dim=1)  # (B,)
    return item_labels.gather(1, top[:, None]).squeeze(1) == labels


def label_share(
    mask: torch.Tensor, item_labels: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """(B,) the share of a bag's items that carry its label: the chance of a random pick."""
    hits = ((item_labels == labels[:, None]) & mask).sum(dim=1)
    return hits / mask.sum(dim=1).clamp(min=1)


def summarise(values: list[float] | torch.Tensor) -> dict[str, float | int | None]:
    """mean, median, quartiles over the examples a measure applies to (NaN left out), with the
    counts of both."""
    values = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    kept = values[~torch.isnan(values)]
    summary: dict[str, float | int | None] = {
        "n": len(kept),
        "not_applicable": len(values) - len(kept),
    }
    if not len(kept):
        return summary | {"mean": None, "median": None, "q1": None, "q3": None}
    q1, median, q3 = torch.quantile(kept, torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    return summary | {
        "mean": float(kept.mean()),
        "median": float(median),
        "q1": float(q1),
        "q3": float(q3),
    }


def finite_or_none(value: float) -> float | None:
    """JSON has no NaN: a measure that does not apply is null."""
    return None if math.isnan(value) else value
