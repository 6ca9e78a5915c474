"""What the translation DataModules share: tokenizers per side, cached ids, bucketed batches,
references grouped by source for multi-reference scoring.

A batch: `src_ids`, `src_mask` (B, S); `tgt_in` ([BOS] y), `tgt_out` (y [EOS]), `tgt_mask` (B, U);
`source_index` (B,) the pair's source in its split's `sources` list, and `decode` (B,) True on the
one pair per source whose translation is scored (on a fixed subset of sources for validation).
"""

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch.utils.data import Dataset

from attnexp.data.base import (
    BucketBatching,
    BucketedDataModule,
    check_settings,
    data_hash,
    fingerprint,
)
from attnexp.data.batching import pad_sequences
from attnexp.data.text import PAD_ID, load_tokenizer, texts_hash, tokenizer_hash, write_tokenizer
from attnexp.data.translation_text import (
    BOS_ID,
    EOS_ID,
    check_tokenizer_kind,
    check_translation_ids,
    decode_sentence,
    encode_sentences,
    normalize_sentence,
    train_translation_tokenizer,
    words,
)
from attnexp.errors import ConfigError

log = logging.getLogger(__name__)

SIDES = ("src", "tgt")
STAGES = ("train", "val", "test")
SIZES_FILE = "translation_sizes.json"  # in the run dir: the sizes the model was built with


@dataclass
class PairSplit:
    """One split's pairs, with the distinct sources and every reference each has."""

    sources: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)
    source_index: list[int] = field(default_factory=list)  # per pair
    unique_sources: list[str] = field(default_factory=list)
    references: list[list[str]] = field(default_factory=list)  # per unique source

    @classmethod
    def from_pairs(cls, pairs: list[tuple[str, str]]) -> "PairSplit":
        split, index = cls(), {}
        for source, target in pairs:
            key = normalize_sentence(source)
            if key not in index:
                index[key] = len(split.unique_sources)
                split.unique_sources.append(source)
                split.references.append([])
            split.sources.append(source)
            split.targets.append(target)
            split.source_index.append(index[key])
            split.references[index[key]].append(normalize_sentence(target))
        return split

    def __len__(self) -> int:
        return len(self.sources)


class TranslationDataset(Dataset):
    """Encoded pairs (ids without BOS/EOS), their source index and whether each is decoded."""

    def __init__(
        self,
        src: list[list[int]],
        tgt: list[list[int]],
        source_index: list[int],
        decode: list[bool],
    ):
        self.src, self.tgt = src, tgt
        self.source_index = torch.tensor(source_index, dtype=torch.long)
        self.decode = torch.tensor(decode, dtype=torch.bool)
        # Bucket on the longer side: both sides of a pair are padded in one batch.
        self.lengths = torch.tensor(
            [max(len(s), len(t)) + 1 for s, t in zip(src, tgt, strict=True)]
        )

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, index: int) -> int:
        return index  # collate gathers the whole batch

    def collate(self, indices: list[int]) -> dict[str, torch.Tensor]:
        src_ids, src_mask = pad_sequences([self.src[i] for i in indices], PAD_ID)  # (B, S)
        tgt_in, tgt_mask = pad_sequences(
            [[BOS_ID, *self.tgt[i]] for i in indices], PAD_ID
        )  # (B, U)
        tgt_out, _ = pad_sequences([[*self.tgt[i], EOS_ID] for i in indices], PAD_ID)  # (B, U)
        return {
            "src_ids": src_ids,
            "src_mask": src_mask,
            "tgt_in": tgt_in,
            "tgt_out": tgt_out,
            "tgt_mask": tgt_mask,
            "source_index": self.source_index[indices],
            "decode": self.decode[indices],
        }


class TranslationDataModule(BucketedDataModule):
    """Base class: a subclass reads the raw pairs (`load_local`, `load_hub`, `load_sample`) and
    splits them (`split_parts`); this class tokenizes and batches.

    Args:
        src, tgt: languages of the source and target side (each one of the subclass's `languages`).
        tokenizer: word | bpe; vocab_size, min_frequency, lowercase: its training settings.
        max_tokens: pairs with more d2l words on either side are left out (null: keep all).
        val_bleu_sources: validation sources translated each epoch for val/bleu (the first ones).
        tokenizer_path: a run dir holding tokenizer_src.json and tokenizer_tgt.json to reuse.
        cache_dir: token-id cache (null: $ATTNEXP_CACHE or ~/.cache/attnexp).
        batch_size / eval_batch_size / pool_batches / num_workers / seed: the length-bucketed
            batches (`BucketBatching`).
    """

    input_kind = "translation"
    cache_subdir = "translation"
    languages: tuple[str, ...] = ()

    def __init__(
        self,
        data_dir: str,
        source: str = "auto",
        src: str = "en",
        tgt: str = "fr",
        tokenizer: str = "word",
        vocab_size: int = 10000,
        min_frequency: int = 2,
        lowercase: bool = False,
        max_tokens: int | None = None,
        val_bleu_sources: int = 200,
        tokenizer_path: str | None = None,
        cache_dir: str | None = None,
        **batching: Any,
    ) -> None:
        for key, lang in (("src", src), ("tgt", tgt)):
            if lang not in self.languages:
                raise ConfigError(
                    f"data.{key}={lang} is not one of {', '.join(self.languages)} (set data.{key}=...)"
                )
        if src == tgt:
            raise ConfigError(
                f"data.src and data.tgt are both {src} (set data.tgt to another language)"
            )
        check_tokenizer_kind(tokenizer)
        check_settings(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            lowercase=lowercase,
            max_tokens=max_tokens,
            val_bleu_sources=val_bleu_sources,
        )
        batching = BucketBatching.of(self, batching, batch_size=64, eval_batch_size=256)
        super().__init__(data_dir, source, cache_dir, batching)
        self.src, self.tgt, self.tokenizer_kind = src, tgt, tokenizer
        self.vocab_size, self.min_frequency = vocab_size, min_frequency
        self.lowercase, self.max_tokens = lowercase, max_tokens
        self.val_bleu_sources, self.tokenizer_path = val_bleu_sources, tokenizer_path
        self.tokenizers: dict[str, Tokenizer] = {}
        self.splits: dict[str, PairSplit] = {}
        # Sizes and checks of the data as split: recorded in the run's metrics.json.
        self.summary: dict[str, Any] = {}
        self.saved_sizes: dict[str, int] | None = None  # a run dir's SIZES_FILE (predict)

    # ------------------------------------------------------------------ subclass API
    def split_parts(self, raw: Any) -> dict[str, list[tuple[str, str]]]:
        """{"train", "val", "test"} -> (source, target) pairs in the configured direction, from
        what `load_raw` read; may add to `self.summary`."""
        raise NotImplementedError

    # ------------------------------------------------------------------ setup
    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        if stage == "predict" and self.saved_sizes is not None:
            self._load_tokenizers(Path(self.tokenizer_path))  # raw sources only: no split read
            return
        raw = self.split_parts(self.load_raw())
        self.data_hash = data_hash({k: tuple(zip(*v, strict=True)) for k, v in raw.items() if v})
        for stage_name in STAGES:
            if not raw.get(stage_name):
                raise ConfigError(
                    f"{self.data_subdir}: the {stage_name} split has no pairs after the length "
                    f"filter (data.max_tokens={self.max_tokens}; raise it, or give more data)"
                )
            self.splits[stage_name] = PairSplit.from_pairs(raw[stage_name])
        train = self.splits["train"]
        if self.tokenizer_path is not None:
            self._load_tokenizers(Path(self.tokenizer_path))
        else:
            for side, texts in (("src", train.sources), ("tgt", train.targets)):
                self.tokenizers[side] = train_translation_tokenizer(
                    texts, self.tokenizer_kind, self.vocab_size, self.min_frequency, self.lowercase
                )
        for stage_name, split in self.splits.items():
            src = self._token_ids("src", split.sources)
            tgt = self._token_ids("tgt", split.targets)
            first = self._decoded_pairs(split, stage_name)
            self.datasets[stage_name] = TranslationDataset(src, tgt, split.source_index, first)
            self.fingerprints[stage_name] = fingerprint(split.sources, split.targets)
            self.summary[f"{stage_name}_pairs"] = len(split)
            self.summary[f"{stage_name}_sources"] = len(split.unique_sources)
        self.summary["src_vocab_size"] = self.tokenizers["src"].get_vocab_size()
        self.summary["tgt_vocab_size"] = self.tokenizers["tgt"].get_vocab_size()
        self.summary["direction"] = f"{self.src}->{self.tgt}"
        log.info("translation data: %s", self.summary)

    def _decoded_pairs(self, split: PairSplit, stage: str) -> list[bool]:
        """True on the first pair of each source (of the first val_bleu_sources for val)."""
        limit = self.val_bleu_sources if stage == "val" else len(split.unique_sources)
        seen, decode = set(), []
        for index in split.source_index:
            decode.append(index < limit and index not in seen)
            seen.add(index)
        return decode

    def _token_ids(self, side: str, texts: list[str]) -> list[list[int]]:
        """Token ids, cached under a hash of the tokenizer and the texts."""
        tokenizer = self.tokenizers[side]

        def encode() -> dict[str, torch.Tensor]:
            ids = encode_sentences(tokenizer, texts)
            return {
                "ids": torch.tensor([i for row in ids for i in row], dtype=torch.int32),
                "lengths": torch.tensor([len(row) for row in ids], dtype=torch.long),
            }

        key = texts_hash(texts, tokenizer_hash(tokenizer))
        flat = self.cached_ids(key, encode, len(texts), f"{side} token ids")
        return [t.tolist() for t in flat["ids"].split(flat["lengths"].tolist())]

    # ------------------------------------------------------------------ artifacts
    def save_artifacts(self, run_dir: str) -> None:
        for side, tokenizer in self.tokenizers.items():
            write_tokenizer(tokenizer, Path(run_dir) / f"tokenizer_{side}.json")
        sizes = {"max_len": self.model_kwargs["max_len"]}
        (Path(run_dir) / SIZES_FILE).write_text(json.dumps(sizes) + "\n", encoding="utf-8")

    def load_artifacts(self, run_dir: str) -> None:
        self.tokenizer_path = run_dir
        sizes = Path(run_dir) / SIZES_FILE
        if sizes.is_file():  # else setup reads the data, which gives them
            self.saved_sizes = json.loads(sizes.read_text(encoding="utf-8"))

    def _load_tokenizers(self, folder: Path) -> None:
        for side in SIDES:
            path = folder / f"tokenizer_{side}.json"
            self.tokenizers[side] = check_translation_ids(
                load_tokenizer(path, setting="data.tokenizer_path"), str(path)
            )

    # ------------------------------------------------------------------ what the task reads
    @property
    def model_kwargs(self) -> dict[str, Any]:
        if self.datasets:
            longest = max(int(d.lengths.max()) for d in self.datasets.values())
            max_len = max(64, 2 * longest)
        else:  # predict: as saved by the run
            max_len = self.saved_sizes["max_len"]
        return {
            "src_vocab_size": self.tokenizers["src"].get_vocab_size(),
            "tgt_vocab_size": self.tokenizers["tgt"].get_vocab_size(),
            "max_len": max_len,
        }

    @property
    def num_classes(self) -> int:
        return int(self.model_kwargs["tgt_vocab_size"])

    def references(self, stage: str) -> list[list[str]]:
        """Every reference of each distinct source of a split, normalised as the tokenizers do."""
        return self.splits[stage].references

    def unique_sources(self, stage: str) -> list[str]:
        return self.splits[stage].unique_sources

    def decode_target(self, ids: list[int]) -> str:
        return decode_sentence(self.tokenizers["tgt"], ids)

    def decode_source(self, ids: list[int]) -> str:
        return decode_sentence(self.tokenizers["src"], ids)

    def encode(self, texts: list[str]) -> dict[str, torch.Tensor]:
        """Raw source sentences -> `src_ids`, `src_mask` as in training."""
        ids, mask = pad_sequences(encode_sentences(self.tokenizers["src"], texts), PAD_ID)
        return {"src_ids": ids, "src_mask": mask}

    # ------------------------------------------------------------------ TensorBoard figures
    def probe_batch(self, num_examples: int = 8) -> dict[str, torch.Tensor] | None:
        """The first validation pair of each of the first sources: what the attention figure
        shows each validation epoch (the model reads the reference, teacher forced)."""
        dataset = self.datasets.get("val")
        if dataset is None:
            return None
        indices = dataset.decode.nonzero().flatten()[:num_examples].tolist()
        if not indices:
            return None
        batch = dataset.collate(indices)
        return {k: batch[k] for k in ("src_ids", "src_mask", "tgt_in")}


def length_filter(pairs: list[tuple[str, str]], max_tokens: int | None) -> list[tuple[str, str]]:
    """Pairs whose sides both have at most `max_tokens` d2l words (None: all)."""
    if max_tokens is None:
        return pairs
    return [p for p in pairs if len(words(p[0])) <= max_tokens and len(words(p[1])) <= max_tokens]
