"""Every measure of an encoder-decoder's cross-attention, per (sentence, target step) pair
(`attnexp.faithfulness.translation`): rank agreement of the step's attention row with gradient x
input and integrated gradients on the source embeddings (captum) and with leave-one-out, toward
the log-probability of the reference token; permutation and uniform weights (one attention to
replace); erasure of source tokens until the step's greedy token changes.

`explain_translation_batch` returns columns as `explain_batch` does (one value per pair), so
`summarise_columns` summarises them; "label" is the reference token, "pred" the greedy one, and
"correct" their agreement (the teacher-forced token accuracy).

Shapes: P pairs, S source tokens, V target vocabulary.
"""

import torch
from captum.attr import LayerGradientXActivation, LayerIntegratedGradients

from attnexp.faithfulness.explainer import Settings, agreement_columns, replacement_columns
from attnexp.faithfulness.measures import (
    erasure_counts,
    first_flips,
    random_order,
    shuffled,
    top_positions,
    uniform,
)
from attnexp.faithfulness.translation import Pairs, Translation, erased_sources


def _attribute(translation: Translation, pairs: Pairs, method: type, **options) -> torch.Tensor:
    """(P, S): captum's layer `method` over the source embedding, toward the reference token's
    log-probability, summed over the features of each source token, zero on padding."""
    found = method(translation.reference_log_prob, translation.embedding)
    rest = (pairs.src_mask, pairs.tgt_in, pairs.step, pairs.target)
    # cuDNN runs a recurrent network's backward in training mode only; the model stays in eval
    with torch.enable_grad(), torch.backends.cudnn.flags(enabled=False):
        attribution = found.attribute(pairs.src_ids, additional_forward_args=rest, **options)
    return attribution.detach().sum(dim=-1).float() * pairs.src_mask


def gradient_x_input(translation: Translation, pairs: Pairs) -> torch.Tensor:
    """(P, S) gradient of the reference token's log-probability times the source embedding."""
    return _attribute(translation, pairs, LayerGradientXActivation)


def integrated_gradients(
    translation: Translation, pairs: Pairs, steps: int, internal_batch_size: int | None = None
) -> torch.Tensor:
    """(P, S) integrated gradients over `steps` steps from the source all padding tokens."""
    baseline = pairs.src_ids.masked_fill(pairs.src_mask, translation.pad_id)
    return _attribute(
        translation, pairs, LayerIntegratedGradients, baselines=baseline, n_steps=steps,
        internal_batch_size=internal_batch_size,
    )  # fmt: skip


@torch.no_grad()
def leave_one_out(translation: Translation, pairs: Pairs, chunk: int = 256) -> torch.Tensor:
    """(P, S) the drop of the reference token's log-probability when the source token alone is
    replaced by padding; 0 on padding and where the source has one token."""
    mask = pairs.src_mask
    full = translation.log_probs(pairs).gather(1, pairs.target[:, None]).squeeze(1)  # (P,)
    rows, cols = torch.nonzero(mask & (mask.sum(1, keepdim=True) > 1), as_tuple=True)
    drops = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    for start in range(0, len(rows), chunk):
        r, c = rows[start : start + chunk], cols[start : start + chunk]
        picked = Pairs(*(t[r] for t in pairs.fields()))
        src = picked.src_ids.clone()
        src[torch.arange(len(r)), c] = translation.pad_id
        found = translation.log_probs(picked, src).gather(1, picked.target[:, None]).squeeze(1)
        drops[r, c] = full[r] - found
    return drops


@torch.no_grad()
def permutation(
    translation: Translation, pairs: Pairs, times: int, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """Every step's attention row shuffled over the source, `times` times: per pair (P,) the
    median absolute change of the greedy token's probability, the share of shuffles that change
    the greedy token."""
    probs = translation.log_probs(pairs).exp()  # (P, V)
    pred = probs.argmax(dim=1, keepdim=True)
    changes, flips = [], []
    mask = pairs.src_mask
    with translation.weights_replaced(lambda w, m: shuffled(w, m, generator), mask):
        for _ in range(times):
            found = translation.log_probs(pairs).exp()
            changes.append((found.gather(1, pred) - probs.gather(1, pred)).abs().squeeze(1))
            flips.append((found.argmax(dim=1, keepdim=True) != pred).float().squeeze(1))
    return {
        "median_change": torch.stack(changes, dim=1).median(dim=1).values,
        "flip_share": torch.stack(flips, dim=1).mean(dim=1),
    }


@torch.no_grad()
def uniform_predictions(translation: Translation, pairs: Pairs) -> torch.Tensor:
    """(P,) the greedy token with every step's weights alike over the source."""
    with translation.weights_replaced(uniform, pairs.src_mask):
        return translation.log_probs(pairs).argmax(dim=1)


@torch.no_grad()
def erasure(
    translation: Translation, pairs: Pairs, order: torch.Tensor, steps: int
) -> dict[str, torch.Tensor]:
    """Source tokens replaced by padding most important first (`order` (P, S)), more at each of
    `steps` fractions (`erasure_counts`), until the step's greedy token changes: `fraction` (P,)
    the fraction erased then (NaN: never, or a one-token source), `flipped` (P, steps)."""
    mask = pairs.src_mask
    n = mask.sum(dim=1)
    pred = translation.log_probs(pairs).argmax(dim=1)
    counts = erasure_counts(n, steps)  # (P, steps)
    wide = pairs.repeated(steps)  # (P * steps, ...)
    drop = top_positions(order.repeat_interleave(steps, dim=0), wide.src_mask, counts.reshape(-1))
    source = erased_sources(wide, drop, translation.pad_id)
    decided = translation.log_probs(wide, source).argmax(dim=1).view(len(pairs), steps)
    return first_flips(decided, pred, n, counts)


def explain_translation_batch(
    translation: Translation, pairs: Pairs, settings: Settings, generator: torch.Generator
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(columns, importances) of P pairs: every measure per pair, and each map's and method's
    (P, S) importances."""
    log_probs, maps = translation.attention_maps(pairs)
    if not maps:
        raise ValueError(f"{type(translation.model).__name__} returned no attention weights")
    mask = pairs.src_mask
    pred = log_probs.argmax(dim=1)
    scores = {
        "gradient_x_input": gradient_x_input(translation, pairs),
        "integrated_gradients": integrated_gradients(
            translation, pairs, settings.ig_steps, settings.internal_batch_size
        ),
        "leave_one_out": leave_one_out(translation, pairs),
    }
    columns = {
        "sentence": pairs.sentence,
        "step": pairs.step,
        "label": pairs.target,
        "pred": pred,
        "correct": (pred == pairs.target).float(),
        "probability": log_probs.gather(1, pred[:, None]).squeeze(1).exp(),
        "reference_log_prob": log_probs.gather(1, pairs.target[:, None]).squeeze(1),
        "positions": mask.sum(dim=1).float(),
    }
    columns |= agreement_columns(maps, scores, mask, settings.top_k)
    if translation.attention_layer is not None:
        shuffles = permutation(translation, pairs, settings.permutations, generator)
        uniform_pred = uniform_predictions(translation, pairs)
        columns |= replacement_columns(shuffles, uniform_pred, pairs.target)
    orders = {"attention": maps["attention"]} | scores | {"random": random_order(mask, generator)}
    for name, order in orders.items():
        erased = erasure(translation, pairs, order, settings.erasure_steps)
        columns[f"erasure/{name}"] = erased["fraction"]
        columns[f"erasure_curve/{name}"] = erased["flipped"].float()
    return columns, {**maps, **scores}
