"""Held-out parts of a split, drawn from `data.split_seed` (null: the run's seed): stratified by
label (IMDB) or plain random (LCQMC's reduced protocol). Both DataModules refuse a fraction that
leaves either side empty with `check_sides`.

A split is `{"text": [str, ...], "label": [int, ...]}`; labels are class indices.
"""

import torch

from attnexp.errors import ConfigError

Split = dict[str, list]  # {"text": [...], "label": [...]}


def held_out_sizes(counts: list[int], fraction: float) -> list[int]:
    """How many of each label's `counts` to hold out: `fraction` of the total (rounded half up),
    shared out by largest remainder, so the labels' shares add up to it."""
    # Rounded to 9 places first: 1 - 0.9 is 0.09999999999999998, and 2005 of it must round as
    # 2005 * 0.1 does (train_fraction=0.9 keeps what a default run's dev split leaves).
    shares = [round(count * fraction, 9) for count in counts]
    sizes = [int(share) for share in shares]
    short = int(round(sum(counts) * fraction, 9) + 0.5) - sum(sizes)
    by_remainder = sorted(range(len(counts)), key=lambda i: sizes[i] - shares[i])
    for i in by_remainder[:short]:
        sizes[i] += 1
    return sizes


def stratified_split(
    labels: list[int], fraction: float, seed: int, block: int = 1
) -> tuple[list[int], list[int]]:
    """(keep, held_out) indices: `fraction` of each label held out, chosen at random for the seed.

    block > 1 holds out whole runs of `block` consecutive examples of a label (in data order; the
    last run taken is cut to the exact count) instead of single examples."""
    generator = torch.Generator().manual_seed(seed)
    labels_t = torch.as_tensor(labels)
    keep, held = [], []
    uniq = labels_t.unique()
    sizes = held_out_sizes([int((labels_t == label).sum()) for label in uniq], fraction)
    for label, n_held in zip(uniq, sizes, strict=True):
        runs = torch.nonzero(labels_t == label).squeeze(1).split(block)
        order = torch.randperm(len(runs), generator=generator).tolist()
        idx = torch.cat([runs[i] for i in order])
        held += idx[:n_held].tolist()
        keep += idx[n_held:].tolist()
    return sorted(keep), sorted(held)


def subset(split: Split, indices: list[int]) -> Split:
    return {k: [split[k][i] for i in indices] for k in ("text", "label")}


def random_split(count: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(keep, held_out) indices of `count` examples: round(count * fraction) (at least 1) held
    out, in the order of one permutation drawn from the seed."""
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed)).tolist()
    held = max(1, int(round(count * fraction)))
    return order[held:], order[:held]


def check_sides(keep: list, held: list, fraction: float, what: str, rest: str) -> None:
    """Each side of a held-out split needs an example: `what` names the examples split ("train
    reviews"), `rest` the side they stay on ("train")."""
    if not keep or not held:
        raise ConfigError(
            f"data.val_fraction={fraction} of the {len(keep) + len(held)} {what} leaves "
            f"{len(held)} for validation and {len(keep)} for {rest}: each needs one "
            f"(set data.val_fraction=...)"
        )
