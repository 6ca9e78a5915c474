"""Importance of each position for the predicted class, from the model's gradients and from
erasing it: gradient x input, integrated gradients (captum) and leave-one-out.

Tokens are attributed through the model's token embedding (captum's layer methods: the
embedding output against the padding token's), bag items through their pixels (against an
empty slot). Both are summed over the features of a position, so each is signed: positive
supports the predicted class. Shapes: B examples, T positions.
"""

import torch
from captum.attr import (
    InputXGradient,
    IntegratedGradients,
    LayerGradientXActivation,
    LayerIntegratedGradients,
)

from attnexp.faithfulness.subject import Subject, erase


def _forward(subject: Subject, keys: list[str]):
    """captum calls forward(ranked input, *other inputs in `keys` order) -> probabilities."""

    def forward(ranked: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        inputs = dict(zip(keys, rest, strict=True)) | {subject.ranked_key: ranked}
        return subject.probabilities(inputs)

    return forward


def _ranked(subject: Subject, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The ranked input as captum takes it: bag items as a leaf that records its gradient."""
    ranked = inputs[subject.ranked_key]
    return ranked.detach().requires_grad_() if ranked.is_floating_point() else ranked


def _per_position(attribution: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T, ...) -> (B, T): summed over the features of each position, zero on padding."""
    return attribution.flatten(2).sum(dim=-1).float() * mask


def _attribute(
    subject: Subject,
    inputs: dict[str, torch.Tensor],
    target: torch.Tensor,
    on_input: type,
    on_layer: type,
    **options,
) -> torch.Tensor:
    """(B, T): captum's `on_input` method over a bag's items, or its `on_layer` method over a
    text's token embedding, toward the `target` (B,) class probability, per position."""
    keys = [k for k in inputs if k != subject.ranked_key]
    forward = _forward(subject, keys)
    method = (
        on_input(forward)
        if subject.input_kind == "bags"
        else on_layer(forward, subject.embedding())
    )
    with torch.enable_grad():
        found = method.attribute(
            _ranked(subject, inputs),
            target=target,
            additional_forward_args=tuple(inputs[k] for k in keys),
            **options,
        )
    return _per_position(found.detach(), inputs["mask"])


def gradient_x_input(
    subject: Subject, inputs: dict[str, torch.Tensor], target: torch.Tensor
) -> torch.Tensor:
    """(B, T): gradient of the `target` (B,) class probability times the input, per position."""
    return _attribute(subject, inputs, target, InputXGradient, LayerGradientXActivation)


def integrated_gradients(
    subject: Subject,
    inputs: dict[str, torch.Tensor],
    target: torch.Tensor,
    steps: int,
    internal_batch_size: int | None = None,
) -> torch.Tensor:
    """(B, T): integrated gradients of the `target` class probability over `steps` steps from
    the baseline (`Subject.baseline`), per position."""
    return _attribute(
        subject, inputs, target, IntegratedGradients, LayerIntegratedGradients,
        baselines=subject.baseline(inputs), n_steps=steps,
        internal_batch_size=internal_batch_size,
    )  # fmt: skip


@torch.no_grad()
def leave_one_out(
    subject: Subject, inputs: dict[str, torch.Tensor], target: torch.Tensor, chunk: int = 256
) -> torch.Tensor:
    """(B, T): the drop of the `target` class probability when the position alone is erased;
    0 where it cannot be (padding, a pair's [CLS] and [SEP], the only position)."""
    removable = subject.removable(inputs)
    full = subject.probabilities(inputs).gather(1, target[:, None]).squeeze(1)  # (B,)
    rows, cols = torch.nonzero(removable & (removable.sum(1, keepdim=True) > 1), as_tuple=True)
    drops = torch.zeros(removable.shape, dtype=torch.float32, device=removable.device)
    for start in range(0, len(rows), chunk):
        r, c = rows[start : start + chunk], cols[start : start + chunk]
        picked = {k: v[r] if torch.is_tensor(v) else v for k, v in inputs.items()}
        drop = torch.zeros_like(picked["mask"])
        drop[torch.arange(len(r)), c] = True
        probs = subject.probabilities(erase(picked, drop)).gather(1, target[r, None]).squeeze(1)
        drops[r, c] = full[r] - probs
    return drops
