"""LCQMC (Liu et al. 2018): do two Chinese questions ask the same thing? Label 1 = same intent.

Sources, tried in this order with `data.source=auto`:
- local: `<data_dir>/lcqmc/{train,dev,test}.tsv` (or the original release's `.txt` names): three
  tab-separated columns text_a, text_b, label (0/1), UTF-8, an optional header line.
- hub (online only): the public parquet copy `C-MTEB/LCQMC`, splits train/validation/test with
  columns sentence1 -> text_a, sentence2 -> text_b, score -> label.
There is no embedded sample: LCQMC is research-only and is not shipped with the package.

`train_split=train` is the standard protocol (train / dev / test). `train_split=dev` is the
reduced protocol for machines without the training file: train on (1 - val_fraction) of dev,
validate on the rest (drawn from `split_seed`, 0 in conf/data/lcqmc.yaml: one split for every run
seed), test on the official test set. Tokenizer, caches and settings: see `attnexp.data.text`.
"""

import itertools
import logging
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from attnexp.data.base import (
    BucketBatching,
    BucketedDataModule,
    check_settings,
    data_hash,
    fingerprint,
)
from attnexp.data.batching import QuestionPairDataset, pad_sequences
from attnexp.data.caches import trained_tokenizer
from attnexp.data.chinese import TOKEN_PATTERN, PairTokenizer, check_pair_len
from attnexp.data.splits import check_sides, random_split
from attnexp.data.text import not_utf8, reused_tokenizer, texts_hash
from attnexp.errors import ConfigError

log = logging.getLogger(__name__)

HUB_NAME = "C-MTEB/LCQMC"
HUB_SPLITS = {"train": "train", "dev": "validation", "test": "test"}
HUB_COLUMNS = ("sentence1", "sentence2", "score")
CACHE_FORMAT = "flat-v2"
Pairs = tuple[list[str], list[str], list[int]]  # texts_a, texts_b, labels


def split_file(folder: Path, split: str) -> Path | None:
    for suffix in (".tsv", ".txt"):
        if (folder / f"{split}{suffix}").is_file():
            return folder / f"{split}{suffix}"
    return None


def read_pairs(path: Path) -> Pairs:
    """Read a text_a<TAB>text_b<TAB>label file; malformed lines raise naming file and line."""
    try:
        return _read_pairs(path)
    except UnicodeDecodeError as err:
        raise not_utf8(path, err, "LCQMC files") from None


def _read_pairs(path: Path) -> Pairs:
    texts_a, texts_b, labels = [], [], []
    # newline="\n": a lone \r inside a text (pasted from elsewhere) does not end the line
    with open(path, encoding="utf-8-sig", newline="\n") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != 3:
                raise ConfigError(
                    f"{path}:{number}: expected 3 tab-separated columns (text_a, text_b, label), "
                    f"found {len(fields)}: {line[:80]!r}"
                )
            if fields[2].strip() not in ("0", "1"):
                if number == 1 and fields[2].strip().lower() == "label":
                    continue  # header line
                raise ConfigError(
                    f"{path}:{number}: label must be 0 or 1, found {fields[2][:20]!r}"
                )
            texts_a.append(fields[0])
            texts_b.append(fields[1])
            labels.append(int(fields[2]))
    if not labels:
        raise ConfigError(f"{path}: no sentence pairs in the file")
    return texts_a, texts_b, labels


class LCQMCDataModule(BucketedDataModule):
    """LCQMC pairs as `input_ids`, `segment_ids`, `mask` (B, T) and `labels` (B,) batches.

    Args:
        data_dir: folder holding `lcqmc/` with the split files.
        source: auto | local | hub.
        train_split: train (standard) | dev (reduced protocol, see the module docstring).
        val_fraction / split_seed: the dev share held out for validation under train_split=dev,
            drawn from split_seed (null: the run's seed).
        max_seq_len: tokens per encoded pair, [CLS] and both [SEP] included (longest-first truncation).
        batch_size / eval_batch_size / pool_batches / num_workers / seed: the length-bucketed
            batches (`BucketBatching`).
        vocab_file: a BERT-style vocab.txt; null builds the vocabulary from the training split.
        min_frequency: a training token must occur this often to get its own id (else [UNK]).
        tokenizer_path / cache_dir: as for every text dataset (see `attnexp.data.text`).
    """

    input_kind = "pairs"
    dataset_name = "lcqmc"
    data_subdir = "lcqmc"
    has_sample = False

    def __init__(
        self,
        data_dir: str,
        source: str = "auto",
        train_split: str = "train",
        val_fraction: float = 0.1,
        split_seed: int | None = 0,
        max_seq_len: int = 128,
        vocab_file: str | None = None,
        min_frequency: int = 1,
        cache_dir: str | None = None,
        tokenizer_path: str | None = None,
        **batching: Any,
    ) -> None:
        if source == "sample":
            raise ConfigError(
                "data.source=sample: LCQMC has no embedded sample (research-only data); use auto, "
                "local or hub"
            )
        check_settings(
            train_split=train_split,
            val_fraction=val_fraction,
            split_seed=split_seed,
            max_seq_len=max_seq_len,
            min_frequency=min_frequency,
        )
        check_pair_len(max_seq_len)
        batching = BucketBatching.of(self, batching, batch_size=32, eval_batch_size=256)
        super().__init__(data_dir, source, cache_dir, batching)
        self.train_split, self.val_fraction = train_split, val_fraction
        self.max_seq_len = max_seq_len
        self.split_seed = self.seed if split_seed is None else split_seed
        self.vocab_file, self.min_frequency = vocab_file, min_frequency
        self.tokenizer_path = tokenizer_path
        self.tokenizer: PairTokenizer | None = None
        self.texts: dict[str, Pairs] = {}

    # ---------------------------------------------------------------- loading
    def _needed_splits(self) -> tuple[str, ...]:
        return ("train", "dev", "test") if self.train_split == "train" else ("dev", "test")

    def load_local(self, folder: Path) -> dict[str, Pairs]:
        files = {split: split_file(folder, split) for split in self._needed_splits()}
        missing = [s for s, f in files.items() if f is None]
        if missing:
            hint = (
                " (or data.train_split=dev: train on 90% of dev, the reduced protocol)"
                if missing == ["train"]
                else ""
            )
            raise ConfigError(
                f"lcqmc: no {' / '.join(f'{s}.tsv' for s in missing)} in {folder} (put the files there: "
                f"text_a<TAB>text_b<TAB>label per line{hint})"
            )
        return {split: read_pairs(path) for split, path in files.items()}

    def load_hub(self) -> dict[str, Pairs]:
        import datasets

        data = {}
        for split in self._needed_splits():
            table = datasets.load_dataset(HUB_NAME, split=HUB_SPLITS[split])
            a, b, label = HUB_COLUMNS
            data[split] = (list(table[a]), list(table[b]), [int(x) for x in table[label]])
        return data

    def load_raw(self) -> dict[str, Pairs]:
        folder = self.data_dir / self.data_subdir
        plan = self.planned_source()  # None: no folder, the hub offline, and no sample to use
        if plan is None or (plan == "local" and not folder.is_dir()):
            raise ConfigError(
                f"lcqmc: no data: {folder} does not exist and the HF hub is offline. Put "
                f"{', '.join(f'{s}.tsv' for s in self._needed_splits())} (text_a<TAB>text_b<TAB>"
                f"label) in {folder}, or set paths.data_dir=<folder holding lcqmc/>"
            )
        return super().load_raw()

    def split_parts(self, raw: dict[str, Pairs]) -> dict[str, Pairs]:
        if self.train_split == "train":
            return {"train": raw["train"], "val": raw["dev"], "test": raw["test"]}
        a, b, y = raw["dev"]
        keep, held = random_split(len(y), self.val_fraction, self.split_seed)
        check_sides(keep, held, self.val_fraction, "dev pairs", "training")

        def take(idx: list[int]) -> Pairs:
            return [a[i] for i in idx], [b[i] for i in idx], [y[i] for i in idx]

        return {"train": take(keep), "val": take(held), "test": raw["test"]}

    def _build_tokenizer(self, train: Pairs) -> PairTokenizer:
        if self.tokenizer_path:
            return PairTokenizer(reused_tokenizer(self.tokenizer_path))
        if self.vocab_file:
            return PairTokenizer.from_vocab_file(self.vocab_file)
        texts = train[0] + train[1]
        rules = ("chars", TOKEN_PATTERN, self.min_frequency)  # what changes the vocabulary
        train_it = lambda: PairTokenizer.from_texts(texts, self.min_frequency).tokenizer  # noqa: E731
        return PairTokenizer(trained_tokenizer(self.cache_folder, texts, rules, train_it))

    def _encode_split(self, name: str, pairs: Pairs) -> QuestionPairDataset:
        """Encode a split once; reuse an earlier encoding of the same vocab + data."""
        key = texts_hash(
            [*pairs[0], *pairs[1]], CACHE_FORMAT, self.tokenizer.fingerprint(), self.max_seq_len
        )
        flat = self.cached_ids(
            f"{name}-{key}",
            lambda: self._encode_flat(pairs),
            len(pairs[0]),
            f"lcqmc {name} encodings",
        )
        return QuestionPairDataset.from_flat(flat, pairs[2], self.tokenizer.pad_id)

    def _encode_flat(self, pairs: Pairs) -> dict[str, torch.Tensor]:
        ids, segments = self.tokenizer.encode_pairs(pairs[0], pairs[1], self.max_seq_len)
        return {
            "ids": torch.tensor(list(itertools.chain.from_iterable(ids)), dtype=torch.long),
            "segments": torch.tensor(
                list(itertools.chain.from_iterable(segments)), dtype=torch.long
            ),
            "lengths": torch.tensor([len(s) for s in ids], dtype=torch.long),
        }

    def setup(self, stage: str | None = None) -> None:
        if stage == "predict" and self.tokenizer_path:
            self.ensure_tokenizer()  # raw inputs only: no dataset needed
            return
        if self.datasets:
            return
        raw = self.load_raw()
        self.data_hash = data_hash(raw)
        self.texts = self.split_parts(raw)
        classes = sorted(set(self.texts["train"][2]))
        if len(classes) < 2:  # it would train without an error and learn one answer
            raise ConfigError(
                f"LCQMC: all {len(self.texts['train'][2])} training pairs have label {classes}: "
                f"a matcher needs both classes, 0 and 1, to learn from (check the labels of the "
                f"{self.source} data, data.train_split={self.train_split})"
            )
        self.tokenizer = self._build_tokenizer(self.texts["train"])
        self.datasets = {
            name: self._encode_split(name, pairs) for name, pairs in self.texts.items()
        }
        self.fingerprints = {name: fingerprint(*pairs) for name, pairs in self.texts.items()}
        for name, (texts_a, texts_b, _) in self.texts.items():
            empty = sum(
                not a.strip() or not b.strip() for a, b in zip(texts_a, texts_b, strict=True)
            )
            if empty:  # matched as they are, but said
                self.note(f"{empty} of the {len(texts_a)} {name} pairs have an empty side")
        counts = {name: len(d) for name, d in self.datasets.items()}
        at_limit = {
            name: int((d.lengths >= self.max_seq_len).sum()) for name, d in self.datasets.items()
        }
        log.info(
            "LCQMC (%s, train_split=%s): %s pairs, vocab %d, pairs at max_seq_len=%d (cut there, "
            "or exactly that long): %s",
            self.source,
            self.train_split,
            counts,
            self.tokenizer.vocab_size,
            self.max_seq_len,
            at_limit,
        )

    def ensure_tokenizer(self) -> PairTokenizer:
        """The tokenizer without reading the data, when a saved one is given (predict)."""
        if self.tokenizer is None:
            if not (self.tokenizer_path or self.vocab_file):
                self.setup()
            else:
                self.tokenizer = self._build_tokenizer(([], [], []))
        return self.tokenizer

    @property
    def model_kwargs(self) -> dict:
        tokenizer = self.ensure_tokenizer()
        return {
            "num_classes": 2,
            "vocab_size": tokenizer.vocab_size,
            "pad_id": tokenizer.pad_id,
            "unk_id": tokenizer.unk_id,
            "max_seq_len": self.max_seq_len,
        }

    def run_tokenizer(self) -> Tokenizer:
        return self.ensure_tokenizer().tokenizer

    def use_tokenizer(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = PairTokenizer(tokenizer)

    # ---------------------------------------------------------------- raw pairs, probes
    def encode(self, texts_a: list[str], texts_b: list[str]) -> dict[str, torch.Tensor]:
        """Raw pairs -> a model batch (no labels). Over-long pairs are truncated to max_seq_len."""
        tokenizer = self.ensure_tokenizer()
        ids, segments = tokenizer.encode_pairs(texts_a, texts_b, self.max_seq_len)
        input_ids, mask = pad_sequences(ids, tokenizer.pad_id)
        segment_ids, _ = pad_sequences(segments, 0)
        return {"input_ids": input_ids, "segment_ids": segment_ids, "mask": mask}

    def probe_batch(self, num_examples: int = 8) -> dict[str, torch.Tensor] | None:
        """The shortest validation pairs of each label (readable heatmaps), fixed across epochs."""
        if not self.datasets:
            return None
        dataset = self.datasets["val"]
        order = torch.argsort(dataset.lengths, stable=True).tolist()
        picked = [i for i in order if dataset.lengths[i] >= 8]
        by_label = [
            [i for i in picked if int(dataset.labels[i]) == y][: max(1, num_examples // 2)]
            for y in (1, 0)
        ]
        indices = [i for group in zip(*by_label, strict=False) for i in group][
            :num_examples
        ] or order[:num_examples]
        return dataset.collate(indices)
