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

import functools
import itertools
import logging
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from attnexp.data.base import AttnDataModule, data_hash, fingerprint
from attnexp.data.batching import bucketed_loader, pad_sequences
from attnexp.data.chinese import TOKEN_PATTERN, PairTokenizer, check_pair_len
from attnexp.data.sources import resolve
from attnexp.data.splits import check_sides, random_split
from attnexp.data.text import (
    cache_folder,
    cached,
    fitting_flat_ids,
    load_tokenizer,
    not_utf8,
    reused_tokenizer,
    save_tokenizer,
    texts_hash,
    trained_tokenizer,
)
from attnexp.errors import (
    ConfigError,
    require_fraction,
    require_non_negative,
    require_positive,
    require_seed,
)

log = logging.getLogger(__name__)

HUB_NAME = "C-MTEB/LCQMC"
HUB_SPLITS = {"train": "train", "dev": "validation", "test": "test"}
HUB_COLUMNS = ("sentence1", "sentence2", "score")
TRAIN_SPLITS = ("train", "dev")
TOKENIZER_FILE = "tokenizer.json"
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


class PairDataset(Dataset):
    """Encoded pairs: token ids and segment ids per example, plus labels."""

    def __init__(
        self, ids: list[torch.Tensor], segments: list[torch.Tensor], labels: torch.Tensor
    ) -> None:
        self.ids, self.segments, self.labels = ids, segments, labels
        self.lengths = torch.tensor([len(s) for s in ids])

    @classmethod
    def from_flat(cls, flat: dict[str, torch.Tensor], labels: list[int]) -> "PairDataset":
        """From the concatenated ids and segments of all pairs plus their lengths. The pairs are
        views of the two flat tensors: a dataset sent to DDP worker processes shares 2 storages, not
        one (and one file descriptor) per pair; a pickle of 20k small tensors also loads ~100x
        slower than the flat ones."""
        lengths = flat["lengths"].tolist()
        ids, segments = flat["ids"].split(lengths), flat["segments"].split(lengths)
        return cls(list(ids), list(segments), torch.tensor(labels))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> int:
        return index  # the collate function gathers whole batches

    def collate(self, indices: list[int], pad_id: int) -> dict[str, torch.Tensor]:
        input_ids, mask = pad_sequences([self.ids[i] for i in indices], pad_id)  # (B, T)
        segment_ids, _ = pad_sequences([self.segments[i] for i in indices], 0)  # (B, T)
        return {
            "input_ids": input_ids,
            "segment_ids": segment_ids,
            "mask": mask,
            "labels": self.labels[indices],
        }


class LCQMCDataModule(AttnDataModule):
    """LCQMC pairs as `input_ids`, `segment_ids`, `mask` (B, T) and `labels` (B,) batches.

    Args:
        data_dir: folder holding `lcqmc/` with the split files.
        source: auto | local | hub.
        train_split: train (standard) | dev (reduced protocol, see the module docstring).
        val_fraction / split_seed: the dev share held out for validation under train_split=dev,
            drawn from split_seed (null: the run's seed).
        max_seq_len: tokens per encoded pair, [CLS] and both [SEP] included (longest-first truncation).
        batch_size / eval_batch_size: pairs per batch (length-bucketed).
        vocab_file: a BERT-style vocab.txt; null builds the vocabulary from the training split.
        min_frequency: a training token must occur this often to get its own id (else [UNK]).
        tokenizer_path / cache_dir: as for every text dataset (see `attnexp.data.text`).
    """

    input_kind = "pairs"
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
        batch_size: int = 32,
        eval_batch_size: int = 256,
        vocab_file: str | None = None,
        min_frequency: int = 1,
        cache_dir: str | None = None,
        tokenizer_path: str | None = None,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if train_split not in TRAIN_SPLITS:
            raise ConfigError(
                f"data.train_split '{train_split}' is not one of {', '.join(TRAIN_SPLITS)} (set data.train_split=...)"
            )
        if source == "sample":
            raise ConfigError(
                "data.source=sample: LCQMC has no embedded sample (research-only data); use auto, local or hub"
            )
        require_fraction("data.val_fraction", val_fraction)
        require_seed("data.split_seed", split_seed)
        require_non_negative("data.num_workers", num_workers)
        for key, value in (
            ("max_seq_len", max_seq_len),
            ("batch_size", batch_size),
            ("eval_batch_size", eval_batch_size),
            ("min_frequency", min_frequency),
        ):
            require_positive(f"data.{key}", value)
        check_pair_len(max_seq_len)
        self.data_dir, self.source_request, self.train_split = Path(data_dir), source, train_split
        self.val_fraction, self.max_seq_len = val_fraction, max_seq_len
        self.split_seed = seed if split_seed is None else split_seed
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.vocab_file, self.min_frequency = vocab_file, min_frequency
        self.tokenizer_path = tokenizer_path
        self.cache_folder = cache_folder(cache_dir, self.data_subdir)
        self.seed, self.num_workers = seed, num_workers
        self.tokenizer: PairTokenizer | None = None
        self.datasets: dict[str, PairDataset] | None = None
        self.texts: dict[str, Pairs] = {}

    # ---------------------------------------------------------------- loading
    def _needed_splits(self) -> tuple[str, ...]:
        return ("train", "dev", "test") if self.train_split == "train" else ("dev", "test")

    def _load_local(self, folder: Path) -> dict[str, Pairs]:
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

    def _load_hub(self) -> dict[str, Pairs]:
        import datasets

        data = {}
        for split in self._needed_splits():
            table = datasets.load_dataset(HUB_NAME, split=HUB_SPLITS[split])
            a, b, label = HUB_COLUMNS
            data[split] = (list(table[a]), list(table[b]), [int(x) for x in table[label]])
        return data

    def _load_raw(self) -> dict[str, Pairs]:
        folder = self.data_dir / self.data_subdir
        plan = self.planned_source()  # None: no folder, the hub offline, and no sample to use
        if plan is None or (plan == "local" and not folder.is_dir()):
            raise ConfigError(
                f"lcqmc: no data: {folder} does not exist and the HF hub is offline. Put "
                f"{', '.join(f'{s}.tsv' for s in self._needed_splits())} (text_a<TAB>text_b<TAB>label) in "
                f"{folder}, or set paths.data_dir=<folder holding lcqmc/>"
            )
        raw, self.source = resolve(
            "lcqmc", self.source_request, folder, self._load_local, self._load_hub, None
        )
        return raw

    def _splits(self, raw: dict[str, Pairs]) -> dict[str, Pairs]:
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

    def _encode(self, name: str, pairs: Pairs) -> PairDataset:
        """Encode a split once; reuse an earlier encoding of the same vocab + data."""
        key = texts_hash(
            [*pairs[0], *pairs[1]], CACHE_FORMAT, self.tokenizer.fingerprint(), self.max_seq_len
        )
        flat = cached(
            self.cache_folder / f"{name}-{key}.pt",
            lambda: self._encode_flat(pairs),
            lambda file: fitting_flat_ids(torch.load(file, weights_only=True), len(pairs[0])),
            lambda value, file: torch.save(value, file),
            f"lcqmc {name} encodings",
        )
        return PairDataset.from_flat(flat, pairs[2])

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
        if self.datasets is not None:
            return
        raw = self._load_raw()
        self.data_hash = data_hash(raw)
        self.texts = self._splits(raw)
        classes = sorted(set(self.texts["train"][2]))
        if len(classes) < 2:  # it would train without an error and learn one answer
            raise ConfigError(
                f"LCQMC: all {len(self.texts['train'][2])} training pairs have label {classes}: "
                f"a matcher needs both classes, 0 and 1, to learn from (check the labels of the "
                f"{self.source} data, data.train_split={self.train_split})"
            )
        self.tokenizer = self._build_tokenizer(self.texts["train"])
        self.datasets = {name: self._encode(name, pairs) for name, pairs in self.texts.items()}
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

    def save_artifacts(self, run_dir: str) -> None:
        """The tokenizer, so evaluate/predict encode text exactly as in training."""
        save_tokenizer(self.ensure_tokenizer().tokenizer, run_dir)

    def load_artifacts(self, run_dir: str) -> None:
        """Use the run's saved tokenizer, so ids mean what they meant in training."""
        path = Path(run_dir) / TOKENIZER_FILE
        if not path.is_file():
            raise ConfigError(
                f"{run_dir}: no {TOKENIZER_FILE} (the run did not finish its setup; retrain it)"
            )
        self.tokenizer_path = str(path)
        self.tokenizer = PairTokenizer(load_tokenizer(path))

    # ---------------------------------------------------------------- loaders
    def _loader(self, split: str, train: bool) -> DataLoader:
        dataset = self.datasets[split]
        return bucketed_loader(
            dataset,
            dataset.lengths,
            self.batch_size if train else self.eval_batch_size,
            train=train,
            seed=self.seed,
            collate_fn=functools.partial(dataset.collate, pad_id=self.tokenizer.pad_id),
            num_workers=self.num_workers,
            resume_at=self.resume_position() if train else None,
            pin_memory=self.pins_memory(),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", False)

    # ---------------------------------------------------------------- raw pairs, probes
    def encode_texts(self, texts_a: list[str], texts_b: list[str]) -> dict[str, torch.Tensor]:
        """Raw pairs -> a model batch (no labels). Over-long pairs are truncated to max_seq_len."""
        tokenizer = self.ensure_tokenizer()
        ids, segments = tokenizer.encode_pairs(texts_a, texts_b, self.max_seq_len)
        input_ids, mask = pad_sequences(ids, tokenizer.pad_id)
        segment_ids, _ = pad_sequences(segments, 0)
        return {"input_ids": input_ids, "segment_ids": segment_ids, "mask": mask}

    def probe_batch(self, num_examples: int = 8) -> dict[str, torch.Tensor] | None:
        """The shortest validation pairs of each label (readable heatmaps), fixed across epochs."""
        if self.datasets is None:
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
        return dataset.collate(indices, self.tokenizer.pad_id)
