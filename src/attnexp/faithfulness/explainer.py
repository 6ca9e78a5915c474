"""Every measure over a batch of examples, and their summary over a test set.

`explain_batch` returns columns, one value per example (B,) (the erasure curves (B, steps)), so
batches concatenate; `summarise_columns` turns a test set's columns into the numbers of
explain.json. Names: the attention maps of `attention_maps` ("attention", "head<h>",
"rollout"), the methods of `METHODS`, and "random" as an erasure order.
"""

from dataclasses import dataclass

import torch

from attnexp.faithfulness.attention import MAIN_MAPS, attention_maps
from attnexp.faithfulness.attribution import (
    gradient_x_input,
    integrated_gradients,
    leave_one_out,
)
from attnexp.faithfulness.measures import (
    erasure,
    finite_or_none,
    kendall_tau,
    label_share,
    permutation,
    random_order,
    summarise,
    top_is_label,
    top_k_overlap,
    uniform_predictions,
)
from attnexp.faithfulness.subject import Subject

METHODS = ("gradient_x_input", "integrated_gradients", "leave_one_out")


@dataclass(frozen=True)
class Settings:
    """ig_steps: integrated-gradient steps; top_k: positions compared by the top-k overlap;
    permutations: shuffles of the weights per example; erasure_steps: fractions of the
    erasable positions tried (1/steps, ..., 1); internal_batch_size: rows per captum pass
    (None: all at once)."""

    ig_steps: int = 20
    top_k: int = 5
    permutations: int = 20
    erasure_steps: int = 10
    internal_batch_size: int | None = None

    def __post_init__(self) -> None:
        for name in ("ig_steps", "top_k", "permutations", "erasure_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a whole number >= 1")


def explain_batch(
    subject: Subject,
    inputs: dict[str, torch.Tensor],
    labels: torch.Tensor,
    settings: Settings,
    generator: torch.Generator,
    item_labels: torch.Tensor | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(columns, importances): every measure per example, and each map's and method's (B, T)
    importances (for the figures). `item_labels` (B, T): each bag item's own label, for the
    ground truth."""
    mask = inputs["mask"]
    with torch.no_grad():
        probs, attention = subject.attention(inputs)
    pred = probs.argmax(dim=1)
    maps = attention_maps(attention, mask)
    if not maps:
        raise ValueError(f"{type(subject.model).__name__} returned no attention weights")
    scores = {
        "gradient_x_input": gradient_x_input(subject, inputs, pred),
        "integrated_gradients": integrated_gradients(
            subject, inputs, pred, settings.ig_steps, settings.internal_batch_size
        ),
        "leave_one_out": leave_one_out(subject, inputs, pred),
    }
    ranked = subject.removable(inputs)
    columns = {
        "label": labels,
        "pred": pred,
        "correct": (pred == labels).float(),
        "probability": probs.gather(1, pred[:, None]).squeeze(1),
        "positions": ranked.sum(dim=1).float(),
    }
    columns |= agreement_columns(maps, scores, ranked, settings.top_k)
    if subject.attention_layer is not None:
        shuffles = permutation(subject, inputs, settings.permutations, generator)
        columns |= replacement_columns(shuffles, uniform_predictions(subject, inputs), labels)
    orders = {name: maps[name] for name in MAIN_MAPS if name in maps}
    orders |= scores | {"random": random_order(mask, generator)}
    for name, order in orders.items():
        erased = erasure(subject, inputs, order, settings.erasure_steps)
        columns[f"erasure/{name}"] = erased["fraction"]
        columns[f"erasure_curve/{name}"] = erased["flipped"].float()
    if item_labels is not None:
        for name, order in orders.items():
            if name != "random":
                columns[f"ground_truth/{name}"] = top_is_label(
                    order, mask, item_labels, labels
                ).float()
        columns["ground_truth/random"] = label_share(mask, item_labels, labels)
    return columns, {**maps, **scores}


def agreement_columns(
    maps: dict[str, torch.Tensor], scores: dict[str, torch.Tensor], ranked: torch.Tensor, k: int
) -> dict[str, torch.Tensor]:
    """Per attention map and method (`METHODS`): Kendall's tau and the top-k overlap of their
    (B, T) importances over the `ranked` (B, T) positions, one value per example."""
    columns = {}
    for name, weights in maps.items():
        for method in METHODS:
            columns[f"kendall_tau/{name}/{method}"] = kendall_tau(weights, scores[method], ranked)
            columns[f"top_k_overlap/{name}/{method}"] = top_k_overlap(
                weights, scores[method], ranked, k
            )
    return columns


def replacement_columns(
    shuffles: dict[str, torch.Tensor], uniform_pred: torch.Tensor, labels: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The permutation's per-example effects and whether the decision with uniform weights is
    right."""
    return {
        "permutation/median_change": shuffles["median_change"],
        "permutation/flip_share": shuffles["flip_share"],
        "uniform/correct": (uniform_pred == labels).float(),
    }


def concatenate(batches: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {key: torch.cat([b[key].cpu() for b in batches]) for key in batches[0]}


def summarise_columns(columns: dict[str, torch.Tensor]) -> dict:
    """explain.json's numbers for one test set: accuracy; per attention map and method the rank
    agreement; the permutation and uniform-weight effects (models with one attention layer); per erasure order
    the fraction erased to flip, the share never flipped and the curve; the ground-truth shares
    (bags). Each per-example measure as mean, median and quartiles (`summarise`)."""
    n = len(columns["correct"])
    out: dict = {"examples": n, "accuracy": float(columns["correct"].mean())}
    agreement: dict = {}
    for key, values in columns.items():
        kind, *names = key.split("/")
        if kind in ("kendall_tau", "top_k_overlap"):
            name, method = names
            agreement.setdefault(name, {}).setdefault(method, {})[kind] = summarise(values)
    out["rank_agreement"] = agreement
    if "permutation/median_change" in columns:
        flips = columns["permutation/flip_share"]
        out["permutation"] = {
            "median_change": summarise(columns["permutation/median_change"]),
            "flip_share": summarise(flips),
            "examples_ever_flipped": float((flips > 0).float().mean()),
        }
        uniform_accuracy = float(columns["uniform/correct"].mean())
        out["uniform"] = {
            "accuracy": uniform_accuracy,
            "accuracy_drop": out["accuracy"] - uniform_accuracy,
        }
    erasures: dict = {}
    for key in columns:
        kind, *names = key.split("/")
        if kind == "erasure":
            fractions = columns[key]
            applies = columns["positions"] > 1
            curve = columns[f"erasure_curve/{names[0]}"][applies]
            erasures[names[0]] = {
                "fraction_to_flip": summarise(fractions),
                "never_flipped": finite_or_none(
                    float((torch.isnan(fractions) & applies).sum() / applies.sum().clamp(min=1))
                ),
                "flipped_curve": [float(v) for v in curve.mean(dim=0)] if len(curve) else [],
            }
    out["erasure"] = erasures
    truth = {
        key.split("/", 1)[1]: float(values.mean())
        for key, values in columns.items()
        if key.startswith("ground_truth/")
    }
    if truth:
        out["ground_truth"] = truth
    return out
