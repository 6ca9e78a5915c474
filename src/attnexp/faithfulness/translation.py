"""An encoder-decoder under test: its cross-attention read per (sentence, target token) pair.

The unit is one target step of one sentence under teacher forcing on the reference: the decoder
reads the reference prefix [BOS] y_1 .. y_{t-1}, and step t's attention row over the source is
compared with what each source token does to that step's log-probability of the reference token
y_t. A source token is erased by putting the padding token in its place (its embedding is zeros;
the position and the source length stay): leave-one-out, erasure and the integrated-gradient
baseline all use it.

Shapes: B sentences, P pairs (sentence, step), S source tokens, U target steps, V target
vocabulary, nh heads, L decoder layers.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from attnexp.faithfulness.override import WeightOverride
from attnexp.modules.masking import masked_softmax
from attnexp.modules.scorers import Scorer
from attnexp.modules.transformer_decoder import TransformerDecoderBlock


@dataclass(frozen=True)
class Pairs:
    """P (sentence, target step) pairs: each row a sentence's source and reference prefix.

    sentence (P,): the row of the batch; step (P,): the target step t; target (P,): the reference
    token y_t; src_ids, src_mask (P, S); tgt_in (P, U) [BOS] y, cut after the last step asked."""

    sentence: torch.Tensor
    step: torch.Tensor
    target: torch.Tensor
    src_ids: torch.Tensor
    src_mask: torch.Tensor
    tgt_in: torch.Tensor

    def __len__(self) -> int:
        return len(self.step)

    def repeated(self, times: int) -> "Pairs":
        """Each pair `times` times in a row: (P, ...) -> (P * times, ...)."""
        return Pairs(*(t.repeat_interleave(times, dim=0) for t in self.fields()))

    def fields(self) -> tuple[torch.Tensor, ...]:
        return (
            self.sentence, self.step, self.target, self.src_ids, self.src_mask, self.tgt_in
        )  # fmt: skip


def target_steps(tgt_mask: torch.Tensor, max_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, steps) (P,): up to `max_tokens` steps of each sentence's reference (tgt_mask (B, U):
    its U_b steps, the last one predicting [EOS]), spread evenly from the first to the last."""
    rows, steps = [], []
    for b, length in enumerate(tgt_mask.sum(dim=1).tolist()):
        count = min(length, max_tokens)
        if count == 0:
            continue
        picked = torch.linspace(0, length - 1, count).round().long().unique()
        rows += [b] * len(picked)
        steps += picked.tolist()
    device = tgt_mask.device
    return torch.tensor(rows, device=device), torch.tensor(steps, device=device)


def pairs_of(batch: dict[str, torch.Tensor], max_tokens: int) -> Pairs:
    """A translation batch (src_ids, src_mask, tgt_in, tgt_out, tgt_mask) as its pairs."""
    rows, steps = target_steps(batch["tgt_mask"], max_tokens)
    width = int(steps.max()) + 1 if len(steps) else 1
    return Pairs(
        sentence=rows,
        step=steps,
        target=batch["tgt_out"][rows, steps],
        src_ids=batch["src_ids"][rows],
        src_mask=batch["src_mask"][rows],
        tgt_in=batch["tgt_in"][rows, :width],
    )


def _source_embedding(model: nn.Module) -> nn.Embedding:
    """The source token embedding: the model's first `nn.Embedding` (the encoder-decoders
    register their encoder, and its table, before the decoder's)."""
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            return module
    raise ValueError(f"{type(model).__name__} has no nn.Embedding to attribute to")


class Translation:
    """A trained encoder-decoder (put in eval mode) read as the measures need it.

    Args:
        model: takes (src_ids, src_mask, tgt_in, return_attention) and returns `ModelOutput`
            with logits (B, U, V) and, asked, its attention (B, U, S).
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model.eval()
        self.embedding = _source_embedding(model)
        self.pad_id = self.embedding.padding_idx if self.embedding.padding_idx is not None else 0
        # A decoder with one scorer (the recurrent seq2seq) has one attention to replace; a
        # stacked decoder has a cross-attention per layer, each read (and none replaced).
        scorers = [m for m in model.modules() if isinstance(m, Scorer)]
        self.scorer = scorers[0] if len(scorers) == 1 else None
        self.cross_layers = [
            m.cross_attn for m in model.modules() if isinstance(m, TransformerDecoderBlock)
        ]

    @property
    def attention_layer(self) -> nn.Module | None:
        return self.scorer

    def log_probs(self, pairs: Pairs, src_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(P, V) each pair's step log-probabilities (`src_ids`: another source in its place)."""
        src = pairs.src_ids if src_ids is None else src_ids
        logits = self.model(src, pairs.src_mask, pairs.tgt_in).logits  # (P, U, V)
        return torch.log_softmax(logits[torch.arange(len(pairs)), pairs.step].float(), dim=-1)

    def reference_log_prob(
        self, src_ids: torch.Tensor, src_mask, tgt_in, step, target
    ) -> torch.Tensor:
        """(P,) log p(target | source, reference prefix) at `step`: the function attributed
        (captum calls it with the source first, the rest as they are)."""
        logits = self.model(src_ids, src_mask, tgt_in).logits  # (P, U, V)
        rows = torch.arange(len(step), device=step.device)
        return torch.log_softmax(logits[rows, step].float(), dim=-1)[rows, target]

    @torch.no_grad()
    def attention_maps(self, pairs: Pairs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(log-probabilities (P, V), {name: (P, S)} the step's attention rows, zero on padding):
        "attention" (the recurrent decoder's weights; a Transformer's last layer averaged over
        its heads), "head<h>" (the last layer's heads), "layer<l>" (each layer, heads averaged,
        from 1); {} for a model without attention."""
        rows = torch.arange(len(pairs), device=pairs.step.device)
        mask = pairs.src_mask
        with cross_attention_recorded(self.cross_layers) as layers:
            out = self.model(pairs.src_ids, mask, pairs.tgt_in, return_attention=True)
        log_probs = torch.log_softmax(out.logits[rows, pairs.step].float(), dim=-1)
        if layers:
            steps = [w.float()[rows, :, pairs.step] for w in layers]  # L x (P, nh, S)
            maps = {"attention": steps[-1].mean(dim=1) * mask}
            if steps[-1].shape[1] > 1:
                maps |= {f"head{h}": steps[-1][:, h] * mask for h in range(steps[-1].shape[1])}
            if len(steps) > 1:
                maps |= {f"layer{i}": w.mean(dim=1) * mask for i, w in enumerate(steps, 1)}
            return log_probs, maps
        if out.attention is None:
            return log_probs, {}
        return log_probs, {"attention": out.attention.float()[rows, pairs.step] * mask}

    @contextmanager
    def weights_replaced(self, override: WeightOverride, mask: torch.Tensor) -> Iterator[None]:
        """Within the block, every decoder step's attention over the source is
        `override(weights, mask)` (mask (P, S): the source of the pairs run): a forward hook
        turns the scorer's scores into the log of the new weights, which the decoder's masked
        softmax returns as they are."""
        if self.scorer is None:
            raise ValueError(
                f"{type(self.model).__name__} has no single attention layer whose weights can be "
                f"replaced"
            )

        def hook(module, args, scores):
            weights = override(masked_softmax(scores, mask), mask)  # (P, S)
            return weights.clamp(min=torch.finfo(weights.dtype).tiny).log()

        handle = self.scorer.register_forward_hook(hook)
        try:
            yield
        finally:
            handle.remove()


@contextmanager
def cross_attention_recorded(layers: list[nn.Module]) -> Iterator[list[torch.Tensor]]:
    """Within the block, each of `layers` (`MultiHeadAttention`) computes its weights and appends
    them (B, nh, U, S) to the list yielded, in call order (the decoder's layers, first to last)."""
    found: list[torch.Tensor] = []

    def ask(module, args, kwargs):
        return args[:3], {**kwargs, "need_weights": True}

    def keep(module, args, kwargs, output):
        found.append(output[1])

    handles = [
        hook
        for layer in layers
        for hook in (
            layer.register_forward_pre_hook(ask, with_kwargs=True),
            layer.register_forward_hook(keep, with_kwargs=True),
        )
    ]
    try:
        yield found
    finally:
        for handle in handles:
            handle.remove()


def erased_sources(pairs: Pairs, drop: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(P, S) the sources with the `drop` positions replaced by the padding token."""
    return pairs.src_ids.masked_fill(drop, pad_id)
