"""Translation (fra-eng, Multi30k): a raw source sentence in; its translation (greedy, or the
n-best of a beam search) with the target-over-source attention out. The same heatmap is the
per-epoch TensorBoard figure of the probe batch, whose translations go beside it as text."""

from pathlib import Path
from typing import Any

import torch
from matplotlib.figure import Figure

from attnexp.data.text import PAD_ID, UNK_ID
from attnexp.data.translation_text import (
    BOS_ID,
    EOS,
    EOS_ID,
    NEVER_EMITTED,
    display_tokens,
    words,
)
from attnexp.modules.decoding import beam_search
from attnexp.predictors.answers import BatchAnswer
from attnexp.predictors.contract import View

Alignment = tuple[list[str], torch.Tensor]  # target tokens ([EOS] last), weights (U, S)


class TranslationPredictor:
    """Over a `TranslationDataModule` (its source and target tokenizers, max_tokens and the
    models' max_len)."""

    raw_fields = ("text",)

    def __init__(self, datamodule: Any) -> None:
        self.data = datamodule

    def _source_tokens(self, text: str) -> list[str]:
        return self.data.tokenizers["src"].encode(text, add_special_tokens=False).tokens

    def check_raw(self, example: dict[str, str]) -> str | None:
        """Why this source cannot be translated (empty, or longer than the model's positions)."""
        text = example.get("text", "")
        if not text.strip():
            return "empty text: nothing to translate"
        tokens, limit = self._source_tokens(text), self.data.model_kwargs["max_len"]
        if not tokens:
            return "no tokens left after normalisation: nothing to translate"
        if len(tokens) > limit:
            return (
                f"{len(tokens)} source tokens, more than the {limit} positions the model was "
                f"built for (twice the longest training pair, at least 64): give a shorter text"
            )
        return None

    def raw_notes(self, example: dict[str, str]) -> list[str]:
        """Unknown words (read as [UNK]) and a source longer than the training pairs."""
        tokenizer, max_tokens = self.data.tokenizers["src"], self.data.max_tokens
        tokens = self._source_tokens(example["text"])
        notes = []
        unknown = [t for t in tokens if tokenizer.token_to_id(t) in (None, UNK_ID)]
        if len(unknown) == len(tokens):
            notes.append(
                f"all {len(tokens)} source tokens are unknown to the vocabulary ([UNK]): the "
                f"translation reflects no word of the text"
            )
        elif unknown:
            notes.append(f"{len(unknown)} of {len(tokens)} source tokens unknown to the vocabulary")
        if max_tokens is not None and len(words(example["text"])) > max_tokens:
            notes.append(
                f"{len(words(example['text']))} words: longer than any training source "
                f"(data.max_tokens={max_tokens})"
            )
        return notes

    def encode_raw(self, examples: list[dict[str, str]]) -> dict[str, torch.Tensor]:
        return self.data.encode([e["text"] for e in examples])

    def predict_batch(
        self,
        model: torch.nn.Module,
        batch: dict[str, torch.Tensor],
        beam_size: int,
        alpha: float,
        max_len: int,
        n_best: int,
    ) -> BatchAnswer:
        """Each source's best translation and score (beam size 1: greedy), and its `n_best`
        (n_best > 1, best first); the attention of the best one (None without attention)."""
        found = beam_search(
            model,
            batch["src_ids"],
            batch["src_mask"],
            BOS_ID,
            EOS_ID,
            max_len,
            max(beam_size, n_best),
            alpha,
            n_best,
            NEVER_EMITTED,
        )
        decode, vocab = self.data.decode_target, self.data.tokenizers["tgt"]
        fields, alignments = [], []
        for hypotheses in found:
            best = hypotheses[0]
            row = {"translation": decode(best.tokens), "score": round(best.score, 4)}
            if n_best > 1:
                row["n_best"] = [
                    {"translation": decode(h.tokens), "score": round(h.score, 4)}
                    for h in hypotheses
                ]
            fields.append(row)
            targets = [*display_tokens(vocab, best.tokens), EOS]
            alignments.append((targets, best.attention))
        has_attention = bool(found) and found[0][0].attention is not None
        return BatchAnswer(
            fields, [f["translation"] for f in fields], alignments if has_attention else None
        )

    def prediction_attention(self, batch: dict, attention: list[Alignment] | None) -> list[View]:
        """Per source: its tokens and, per target token ("<step> <token>"), the attention it
        paid them; [] without attention."""
        if attention is None:
            return []
        vocab, views = self.data.tokenizers["src"], []
        for ids, mask, (targets, weights) in zip(
            batch["src_ids"], batch["src_mask"], attention, strict=True
        ):
            sources = display_tokens(vocab, ids[mask].tolist())
            per_target = {f"{j} {t}": weights[j, : len(sources)] for j, t in enumerate(targets)}
            views.append((sources, per_target))
        return views

    def prediction_figures(
        self,
        batch: dict,
        translations: list[str],
        attention: list[Alignment] | None,
        views: list[View],
        out_stems: list[Path | None],
    ) -> list[Path]:
        """Per source with a stem: the target x source heatmap `<stem>.png` and `<stem>.html`
        (one line per target token, the source shaded by its attention)."""
        from attnexp.viz.text import save_prediction
        from attnexp.viz.translation import alignment_figure

        if attention is None:
            return []
        written = []
        for (sources, per_target), (targets, weights), title, stem in zip(
            views, attention, translations, out_stems, strict=True
        ):
            if stem is None:
                continue
            figure = alignment_figure([sources], [targets], weights[None], columns=1)
            figure.suptitle(title, fontsize=8)
            written += save_prediction(figure, sources, per_target, title, stem)
        return written

    def attention_figure(
        self, batch: dict[str, torch.Tensor], logits: torch.Tensor, attention: Any
    ) -> Figure | None:
        """The probe pairs' target-over-source attention (B, U, S), teacher forced."""
        from attnexp.viz.translation import alignment_figure

        if attention is None:
            return None
        src_vocab, tgt_vocab = self.data.tokenizers["src"], self.data.tokenizers["tgt"]
        sources = [
            display_tokens(src_vocab, ids[mask].tolist())
            for ids, mask in zip(batch["src_ids"], batch["src_mask"], strict=True)
        ]
        targets = [  # the tokens each step emits: the reference shifted left, then [EOS]
            [*display_tokens(tgt_vocab, ids[ids != PAD_ID].tolist()[1:]), EOS]
            for ids in batch["tgt_in"]
        ]
        return alignment_figure(sources, targets, attention)

    def probe_texts(self, batch: dict[str, torch.Tensor], task: Any) -> dict[str, str]:
        """The probe pairs' greedy translations beside source and reference, as a Markdown table
        (TensorBoard's text tab renders it) under `translations/val_examples`."""
        data = self.data
        hypotheses = task.translate(batch["src_ids"], batch["src_mask"], beam=False)
        rows = ["| source | reference | translation |", "|---|---|---|"]
        for ids, mask, reference, hypothesis in zip(
            batch["src_ids"], batch["src_mask"], batch["tgt_in"], hypotheses, strict=True
        ):
            cells = (
                data.decode_source(ids[mask].tolist()),
                data.decode_target(reference.tolist()),  # [BOS] and padding are left out
                data.decode_target(hypothesis),
            )
            rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        return {"translations/val_examples": "\n".join(rows)}
