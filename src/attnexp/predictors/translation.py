"""Translation (fra-eng, Multi30k): a raw source sentence in; its target-over-source attention
drawn as one heatmap per sentence (the per-epoch TensorBoard figure of the probe batch).
Translating itself is the task's (`TranslationTask.translate_texts`: greedy or beam, n-best)."""

from typing import Any

import torch
from matplotlib.figure import Figure

from attnexp.data.text import PAD_ID, UNK_ID
from attnexp.data.translation_text import words


class TranslationPredictor:
    """Over a `TranslationDataModule` (its source and target tokenizers and max_tokens)."""

    raw_fields = ("text",)

    def __init__(self, datamodule: Any) -> None:
        self.data = datamodule

    def check_raw(self, example: dict[str, str]) -> str | None:
        if not example.get("text", "").strip():
            return "empty text: nothing to translate"
        return None

    def raw_notes(self, example: dict[str, str]) -> list[str]:
        """Unknown words (read as [UNK]) and a source longer than the training pairs."""
        tokenizer, max_tokens = self.data.tokenizers["src"], self.data.max_tokens
        tokens = tokenizer.encode(example["text"], add_special_tokens=False).tokens
        notes = []
        unknown = [t for t in tokens if tokenizer.token_to_id(t) in (None, UNK_ID)]
        if unknown:
            notes.append(f"{len(unknown)} of {len(tokens)} source tokens unknown to the vocabulary")
        if max_tokens is not None and len(words(example["text"])) > max_tokens:
            notes.append(
                f"{len(words(example['text']))} words: longer than any training source "
                f"(data.max_tokens={max_tokens})"
            )
        return notes

    def encode_raw(self, examples: list[dict[str, str]]) -> dict[str, torch.Tensor]:
        return self.data.encode_sources([e["text"] for e in examples])

    def attention_figure(
        self, batch: dict[str, torch.Tensor], logits: torch.Tensor, attention: Any
    ) -> Figure | None:
        """The probe pairs' target-over-source attention (B, U, S), teacher forced."""
        from attnexp.viz.translation import alignment_figure

        if attention is None:
            return None
        src_vocab, tgt_vocab = self.data.tokenizers["src"], self.data.tokenizers["tgt"]
        sources = [
            [src_vocab.id_to_token(i) for i in ids[mask].tolist()]
            for ids, mask in zip(batch["src_ids"], batch["src_mask"], strict=True)
        ]
        targets = [  # the tokens each step emits: the reference shifted left, then [EOS]
            [tgt_vocab.id_to_token(i) for i in ids[ids != PAD_ID].tolist()[1:]] + ["[EOS]"]
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
