"""Single texts (IMDB reviews): raw text in, a label with each token's attention out."""

import sys
from pathlib import Path
from typing import Any

import torch
from matplotlib.figure import Figure

from attnexp.data.text import UNK_ID, encode_texts, truncate
from attnexp.predictors.answers import BatchAnswer, classify_batch
from attnexp.predictors.contract import View


class TokenPredictor:
    """Over a `TextClassificationDataModule` (its tokenizer, labels, max_seq_len, truncation)."""

    raw_fields = ("text",)  # the CLI keys of one example; a texts_file line holds them

    def __init__(self, datamodule: Any) -> None:
        self.data = datamodule

    def tokens(self, ids: list[int]) -> list[str]:
        return [self.data.tokenizer.id_to_token(i) for i in ids]

    def check_raw(self, example: dict[str, str]) -> str | None:
        """Why this example cannot be classified, or None if it can."""
        text = example.get("text")
        if text is None or not text.strip():
            return "empty text: nothing to classify"
        if not self.data.tokenizer.encode(text, add_special_tokens=False).ids:
            return "no tokens left after normalisation: nothing to classify"
        return None

    def raw_notes(self, example: dict[str, str]) -> list[str]:
        """What the user should know about how the text was read (cut, unknown words)."""
        data = self.data
        (ids,) = encode_texts(data.tokenizer, [example["text"]], sys.maxsize)  # as the model reads
        notes = []
        if len(ids) > data.max_seq_len:
            which = "first" if data.truncation == "head" else "first and last"
            notes.append(
                f"long text: only the {which} {data.max_seq_len} of {len(ids)} tokens are read "
                f"(data.max_seq_len, data.truncation={data.truncation})"
            )
        ids = truncate(ids, data.max_seq_len, data.truncation)
        unknown = sum(i == UNK_ID for i in ids)
        if unknown == len(ids):
            notes.append(
                "every word is unknown to the vocabulary: the prediction reflects no word of the text"
            )
        elif unknown:
            notes.append(f"{unknown} unknown word(s) read as [UNK]")
        return notes

    def encode_raw(self, examples: list[dict[str, str]]) -> dict[str, torch.Tensor]:
        """Raw examples -> a model batch (no labels), exactly as in training."""
        return self.data.encode([e["text"] for e in examples])

    def predict_batch(self, model: torch.nn.Module, batch: dict) -> BatchAnswer:
        return classify_batch(model, batch, self.prediction_label)

    def prediction_label(self, class_index: int) -> str:
        return self.data.labels[class_index]

    def _token_rows(self, batch: dict, attention: Any) -> tuple[list[list[str]], dict]:
        from attnexp.viz.text import token_weights

        mask = batch["mask"].cpu()
        rows = [
            self.tokens(ids[m].tolist())
            for ids, m in zip(batch["input_ids"].cpu(), mask, strict=True)
        ]
        return rows, token_weights(attention, mask)

    def prediction_attention(self, batch: dict, attention: Any) -> list[View]:
        """Per example: its tokens and the attention each receives per view ({"pooling": (T,)}
        or one per head); [] without attention."""
        if attention is None:
            return []
        rows, weights = self._token_rows(batch, attention)
        return [
            (tokens, {view: w[i, : len(tokens)] for view, w in weights.items()})
            for i, tokens in enumerate(rows)
        ]

    def prediction_figures(
        self,
        batch: dict,
        probs: torch.Tensor,
        attention: Any,
        views: list[View],
        out_stems: list[Path | None],
    ) -> list[Path]:
        """Per example with a stem: a token heatmap `<stem>.png` and a self-contained
        `<stem>.html`; returns the paths written. views: `prediction_attention`'s."""
        from attnexp.viz.text import example_heatmap, save_prediction

        if attention is None:
            return []
        written = []
        for i, ((tokens, per_view), stem) in enumerate(zip(views, out_stems, strict=True)):
            if stem is None:
                continue
            title = f"{self.prediction_label(int(probs[i].argmax()))} ({float(probs[i].max()):.3f})"
            figure = example_heatmap(tokens, per_view, title)
            written += save_prediction(figure, tokens, per_view, title, stem)
        return written

    def attention_figure(
        self, batch: dict, logits: torch.Tensor, attention: Any
    ) -> dict[str, Figure] | None:
        """The probe texts' attention, one heatmap per view (`attention/<view>`)."""
        from attnexp.viz.text import token_heatmap

        if attention is None:
            return None
        rows, weights = self._token_rows(batch, attention)
        probs = logits.softmax(-1).cpu()
        names = self.data.labels
        labels = [
            f"y={names[int(y)][:3]} p={names[int(p)][:3]} {float(pr.max()):.2f}"
            for y, p, pr in zip(batch["labels"].cpu(), probs.argmax(-1), probs, strict=True)
        ]
        return {
            f"attention/{tag}": token_heatmap(rows, w, labels, title=tag)
            for tag, w in weights.items()
        }

    def probe_texts(self, batch: dict[str, torch.Tensor], task: Any) -> dict[str, str]:
        return {}  # the figures say what the model made of the probes
