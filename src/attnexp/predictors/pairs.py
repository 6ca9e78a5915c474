"""Sentence pairs (LCQMC): two raw texts in, same / different with each token's attention per
layer and head out."""

from pathlib import Path
from typing import Any

import torch
from matplotlib.figure import Figure

from attnexp.predictors.answers import BatchAnswer, classify_batch
from attnexp.predictors.contract import View

LABEL_NAMES = ("not similar", "similar")


class PairPredictor:
    """Over an `LCQMCDataModule` (its pair tokenizer and max_seq_len)."""

    raw_fields = ("text_a", "text_b")

    def __init__(self, datamodule: Any) -> None:
        self.data = datamodule

    def tokens(self, ids: list[int]) -> list[str]:
        return self.data.ensure_tokenizer().ids_to_tokens(ids)

    def check_raw(self, example: dict[str, str]) -> str | None:
        empty = [k for k in self.raw_fields if not example.get(k, "").strip()]
        if empty:
            verb = "is" if len(empty) == 1 else "are"
            return f"{' and '.join(empty)} {verb} empty: there is nothing to compare"
        return None

    def raw_notes(self, example: dict[str, str]) -> list[str]:
        tokenizer, max_len = self.data.ensure_tokenizer(), self.data.max_seq_len
        notes = []
        tokens = [tokenizer.tokenize(example[k]) for k in self.raw_fields]
        total = sum(len(t) for t in tokens) + 3
        if total > max_len:
            notes.append(
                f"{total} tokens with [CLS]/[SEP]: truncated to data.max_seq_len={max_len} "
                f"(the longer text loses its tail first)"
            )
        # counted in what the model reads: after truncation, as the token predictor counts
        (ids,), _ = tokenizer.encode_pairs([example["text_a"]], [example["text_b"]], max_len)
        read = tokenizer.ids_to_tokens(ids)
        unknown = sum(token == "[UNK]" for token in read)
        if unknown:
            notes.append(
                f"{unknown} of the {len(read) - 3} tokens read are not in the training vocabulary "
                f"([UNK])"
            )
        return notes

    def encode_raw(self, examples: list[dict[str, str]]) -> dict[str, torch.Tensor]:
        return self.data.encode([e["text_a"] for e in examples], [e["text_b"] for e in examples])

    def predict_batch(self, model: torch.nn.Module, batch: dict) -> BatchAnswer:
        return classify_batch(model, batch, self.prediction_label)

    def prediction_label(self, class_index: int) -> str:
        return LABEL_NAMES[class_index]

    def prediction_attention(self, batch: dict, attention: Any) -> list[View]:
        """Per pair: its tokens ([CLS] a [SEP] b [SEP]) and the attention each receives, per layer
        and head (named as in the PNG's panels)."""
        from attnexp.viz.text import token_weights

        if attention is None:
            return []
        received = {
            f"layer {layer + 1} head {head + 1}": weights
            for layer, maps in enumerate(attention)
            for head, weights in enumerate(token_weights(maps, batch["mask"]).values())
        }
        examples = []
        for b, ids in enumerate(batch["input_ids"]):
            length = int(batch["mask"][b].sum())
            tokens = self.data.ensure_tokenizer().ids_to_tokens(ids[:length].tolist())
            examples.append((tokens, {view: w[b, :length] for view, w in received.items()}))
        return examples

    def prediction_figures(
        self,
        batch: dict,
        probs: torch.Tensor,
        attention: Any,
        views: list[View],
        out_stems: list[Path | None],
    ) -> list[Path]:
        """Per pair: a PNG of layers x heads heatmaps over its tokens, and an HTML page of the
        attention each token receives (per layer and head)."""
        from attnexp.viz.pairs import plot_pair_attention
        from attnexp.viz.text import save_prediction

        if attention is None:
            return []
        written = []
        for b, ((tokens, per_view), stem) in enumerate(zip(views, out_stems, strict=True)):
            if stem is None:
                continue
            maps = [layer[b, :, : len(tokens), : len(tokens)] for layer in attention]
            title = f"p(similar)={float(probs[b, 1]):.2f}"
            figure = plot_pair_attention(tokens, maps, title)
            written += save_prediction(figure, tokens, per_view, title, stem, dpi=100)
        return written

    def attention_figure(
        self, batch: dict, logits: torch.Tensor, attention: Any, max_figures: int = 2
    ) -> dict[str, Figure] | None:
        """One layers x heads heatmap grid per example, for the first `max_figures` examples."""
        from attnexp.viz.pairs import plot_pair_attention

        if attention is None:
            return None
        probs = torch.softmax(logits.detach().float(), dim=-1)[:, 1].cpu()
        figures = {}
        for b in range(min(max_figures, len(batch["input_ids"]))):
            length = int(batch["mask"][b].sum())
            ids = batch["input_ids"][b, :length].tolist()
            tokens = self.data.ensure_tokenizer().ids_to_tokens(ids)
            label = int(batch["labels"][b]) if "labels" in batch else None
            title = f"p(similar)={float(probs[b]):.2f}" + (
                f", label={LABEL_NAMES[label]}" if label is not None else ""
            )
            maps = [layer[b, :, :length, :length] for layer in attention]
            figures[f"attention/pair{b}"] = plot_pair_attention(tokens, maps, title)
        return figures

    def probe_texts(self, batch: dict[str, torch.Tensor], task: Any) -> dict[str, str]:
        return {}  # the figures say what the model made of the probes
