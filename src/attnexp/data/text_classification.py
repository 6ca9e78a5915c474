"""Text -> label datasets: what every one of them needs, as a base DataModule to subclass.

A dataset names its folder, labels and probe texts and says where its splits come from (class
attributes and the `load_*` methods below); the base does the rest: a stratified validation split
drawn from `data.seed`, a word-level tokenizer trained on the training split (saved in the run dir,
so evaluate/predict read text as training did), the token-id cache under
`<cache_dir>/<data_subdir>/`, length-bucketed resumable training batches and the encoding of raw
texts (predict's, the probe texts'; `attnexp.predictors.tokens` reads and draws predictions).

A split is `{"text": [str, ...], "label": [int, ...]}`; labels are indices into `labels`.
"""

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
from attnexp.data.batching import TokenDataset, pad_sequences
from attnexp.data.caches import trained_tokenizer
from attnexp.data.sources import sample_path
from attnexp.data.splits import Split, check_sides, stratified_split, subset
from attnexp.data.text import (
    HTML_BREAK,
    PAD_ID,
    check_word_ids,
    encode_texts,
    reused_tokenizer,
    texts_hash,
    tokenize_dataset,
    tokenizer_hash,
    train_word_tokenizer,
    word_pre_tokenizer,
)
from attnexp.errors import ConfigError

SPLITS = ("train", "test")  # what the loaders return; validation is carved out of one of them
# In the token-id cache key: how texts become ids beyond the tokenizer (a typed "[PAD]" reads as
# [UNK]), so ids cached under another rule are not reused.
ENCODING = "pad-as-unk"


class TextClassificationDataModule(BucketedDataModule):
    """Batches of `input_ids`, `mask` (B, T) and `labels` (B,) from labelled texts.

    A dataset subclass sets:
        dataset_name: how messages and logs name it ("IMDB").
        data_subdir: its folder under `data_dir`, and of its token-id cache under `cache_dir`.
        labels: class names, by label index.
        probes: (text, label) pairs whose attention is drawn every validation epoch.
        noun: what one example is called in messages ("reviews").
        hub_name / sample_file: an HF hub dataset with train/test splits and text/label columns,
            a parquet in `attnexp/data/samples` with text/label/split columns (None: no such source).
    and overrides `load_local` (default: `{train,test}.parquet`), `load_hub`, `load_sample` or
    `split_parts` where its data differ.

    Args:
        data_dir: folder holding `<data_subdir>/`.
        source: auto | local | hub | sample.
        vocab_size / min_frequency: word-level tokenizer trained on the training split.
        word_split: "punctuation" (words and punctuation marks are separate tokens), "whitespace"
            (`text.split()`, as the nndl chapter does) or "words" (punctuation dropped).
        max_seq_len / truncation: texts are cut to max_seq_len tokens, the first ones ("head") or
            the first and last halves ("head_tail").
        batch_size / eval_batch_size / pool_batches / num_workers: the batches (`BucketBatching`;
            eval_batch_size null: batch_size).
        val_fraction: share of the training texts held out (stratified by label) for validation.
        train_fraction: share of the training texts that train, after validation is carved out
            (stratified by label, drawn from the split seed as the held-out texts are): 1 keeps
            all; less makes a learning curve, or trains a `val_from=test` run on the texts a
            `val_from=train` run of the same seed trains on (0.9 with val_fraction 0.1).
        seed / split_seed: `seed` draws the batch orders, and the held-out texts unless
            `split_seed` is given (then every run seed validates on the same texts).
        tokenizer_path / cache_dir: as for every text dataset (see `attnexp.data.text`).
    """

    input_kind = "tokens"
    labels: tuple[str, ...] = ()
    probes: tuple[tuple[str, int], ...] = ()
    noun = "texts"
    hub_name: str | None = None
    sample_file: str | None = None

    def __init__(
        self,
        data_dir: str,
        source: str = "auto",
        vocab_size: int = 30000,
        min_frequency: int = 2,
        lowercase: bool = True,
        word_split: str = "punctuation",
        max_seq_len: int = 256,
        truncation: str = "head",
        val_fraction: float = 0.1,
        train_fraction: float = 1.0,
        tokenizer_path: str | None = None,
        cache_dir: str | None = None,
        split_seed: int | None = None,
        **batching: Any,
    ) -> None:
        check_settings(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            lowercase=lowercase,
            max_seq_len=max_seq_len,
            truncation=truncation,
            val_fraction=val_fraction,
            train_fraction=train_fraction,
            split_seed=split_seed,
        )
        word_pre_tokenizer(word_split)  # fail on a bad value now, not after loading the data
        super().__init__(data_dir, source, cache_dir, BucketBatching.of(self, batching))
        self.vocab_size, self.min_frequency, self.lowercase = vocab_size, min_frequency, lowercase
        self.word_split, self.max_seq_len, self.truncation = word_split, max_seq_len, truncation
        self.val_fraction, self.train_fraction = val_fraction, train_fraction
        self.split_seed = self.seed if split_seed is None else split_seed
        self.tokenizer = (
            check_word_ids(reused_tokenizer(tokenizer_path), tokenizer_path, "data.tokenizer_path")
            if tokenizer_path
            else None
        )

    @property
    def _log(self) -> logging.Logger:
        # The dataset's own module's logger: train.log names the dataset, not this base.
        return logging.getLogger(type(self).__module__)

    def __init_subclass__(cls, **kwargs) -> None:
        # The base's source flags, as plain class attributes (read on the class, as for LCQMC).
        super().__init_subclass__(**kwargs)
        cls.has_hub, cls.has_sample = cls.hub_name is not None, cls.sample_file is not None

    # --- sources: a subclass overrides what differs ---------------------------------------------
    def load_local(self, folder: Path) -> dict[str, Split]:
        """`<folder>/{train,test}.parquet`, columns `text` (a string) and `label` (an index)."""
        if not all((folder / f"{s}.parquet").is_file() for s in SPLITS):
            raise ConfigError(
                f"{self.dataset_name}: {folder} holds no train.parquet + test.parquet (put the "
                f"files there, or set {self._other_data()})"
            )
        return {s: self.read_parquet(folder / f"{s}.parquet") for s in SPLITS}

    def load_hub(self) -> dict[str, Split]:
        from datasets import load_dataset

        ds = load_dataset(self.hub_name)  # lists, as from local files (not datasets' Column)
        return {s: {"text": list(ds[s]["text"]), "label": list(ds[s]["label"])} for s in SPLITS}

    def load_sample(self) -> dict[str, Split]:
        import pyarrow.parquet as pq

        rows = pq.read_table(sample_path(self.sample_file)).to_pydict()
        return {
            s: {
                k: [v for v, split in zip(rows[k], rows["split"], strict=True) if split == s]
                for k in ("text", "label")
            }
            for s in SPLITS
        }

    def read_parquet(self, path: Path) -> Split:
        """One split's parquet file; a row that is not (a string, a label index) is refused."""
        import pyarrow.parquet as pq

        name = self.dataset_name
        try:
            table = pq.read_table(path, columns=["text", "label"])
        except Exception as err:  # pyarrow raises several types for missing columns / corrupt files
            raise ConfigError(
                f"{name}: cannot read {path} as parquet with text, label columns ({err})"
            ) from err
        split = table.to_pydict()
        if not split["text"]:
            raise ConfigError(
                f"{name}: {path} holds no {self.noun}: each split needs text, label rows (fix the "
                f"file, or set {self._other_data()})"
            )
        names = [f"{i} ({label})" for i, label in enumerate(self.labels)]
        choices = f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]
        for row, (text, label) in enumerate(zip(split["text"], split["label"], strict=True)):
            if type(label) is not int or label not in range(len(self.labels)):  # 1.0, True
                raise ConfigError(
                    f"{name}: {path} row {row}: label must be {choices} as an integer, found "
                    f"{label!r} (fix the file)"
                )
            if not isinstance(text, str):
                raise ConfigError(f"{name}: {path} row {row}: the text is {text!r}, not a string")
        return split

    def _other_data(self) -> str:
        return "paths.data_dir=..." + (" / data.source=sample" if self.has_sample else "")

    def split_parts(self, raw: dict[str, Split]) -> dict[str, Split]:
        """train / val / test from the loaded train and test splits (val: out of train)."""
        return self.carve_validation(raw, "train")

    def carve_validation(
        self, raw: dict[str, Split], source: str, block: int = 1
    ) -> dict[str, Split]:
        """`val_fraction` of split `source` (stratified by label, drawn from the split seed) becomes
        val, the rest stays `source` (see `stratified_split` for `block`)."""
        carved = raw[source]
        keep_idx, val_idx = stratified_split(
            carved["label"], self.val_fraction, self.split_seed, block
        )
        check_sides(keep_idx, val_idx, self.val_fraction, f"{source} {self.noun}", source)
        return {
            "train": raw["train"],
            "test": raw["test"],
            source: subset(carved, keep_idx),
            "val": subset(carved, val_idx),
        }

    # --- contract -------------------------------------------------------------------------------
    @property
    def model_kwargs(self) -> dict:
        if self.tokenizer is None:
            raise RuntimeError(f"{type(self).__name__}: call setup() or load_artifacts() first")
        return {
            "num_classes": len(self.labels),
            "vocab_size": self.tokenizer.get_vocab_size(),
            "pad_id": PAD_ID,
            "max_seq_len": self.max_seq_len,
        }

    def run_tokenizer(self) -> Tokenizer:
        return self.tokenizer

    def use_tokenizer(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    # --- data -----------------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        if self.datasets or stage == "predict":
            return
        raw = self.load_raw()
        self.data_hash = data_hash(raw)
        parts = self.split_parts(raw)
        parts["train"] = self.thin_training(parts["train"])
        self.check_training_split(parts["train"])
        if self.tokenizer is None:
            self.tokenizer = self._train_tokenizer(parts["train"]["text"])
        tok_hash = tokenizer_hash(self.tokenizer)
        self.fingerprints = {n: fingerprint(p["text"], p["label"]) for n, p in parts.items()}
        for name, part in parts.items():
            empty = sum(not text.strip() for text in part["text"])
            if empty:  # scored as they are (no words: the model sees padding only), but said
                self.note(f"{empty} of the {len(part['text'])} {name} {self.noun} are empty")
        from datasets import Dataset  # here, not at the top: predict never tokenizes a split

        for name, part in parts.items():
            key = texts_hash(part["text"], tok_hash, self.max_seq_len, self.truncation, ENCODING)
            cache = self.cache_folder / f"{name}-{key}.arrow"
            encoded = tokenize_dataset(
                Dataset.from_dict(part),
                self.tokenizer,
                self.max_seq_len,
                cache,
                truncation=self.truncation,
            )
            self.datasets[name] = TokenDataset(encoded, part["label"])
        self._log.info(
            "%s (%s): %d train / %d val / %d test %s, vocab %d, max_seq_len %d",
            self.dataset_name,
            self.source,
            *(len(self.datasets[s]) for s in ("train", "val", "test")),
            self.noun,
            self.tokenizer.get_vocab_size(),
            self.max_seq_len,
        )

    def thin_training(self, train: Split) -> Split:
        """The `train_fraction` share of the training texts (all of them at 1)."""
        if self.train_fraction == 1:
            return train
        keep, _ = stratified_split(train["label"], 1 - self.train_fraction, self.split_seed)
        if not keep:
            raise ConfigError(
                f"data.train_fraction={self.train_fraction} of the {len(train['label'])} training "
                f"{self.noun} keeps none (set data.train_fraction=...)"
            )
        self._log.info(
            "training on %d of the %d training %s (data.train_fraction=%s)",
            len(keep),
            len(train["label"]),
            self.noun,
            self.train_fraction,
        )
        return subset(train, keep)

    def check_training_split(self, train: Split) -> None:
        """Data that would train without an error and teach nothing is refused: a training split
        of one class, or of texts without a single word."""
        where = f"the {self.source} data" + (
            f" in {self.data_dir / self.data_subdir}" if self.source == "local" else ""
        )
        classes = sorted(set(train["label"]))
        if len(classes) < 2:
            named = ", ".join(f"{i} ({self.labels[i]})" for i in classes)
            raise ConfigError(
                f"{self.dataset_name}: all {len(train['label'])} training {self.noun} have label {named}: a "
                f"classifier needs at least two classes to learn from (check the labels of "
                f"{where})"
            )
        if not any(text.strip() for text in train["text"]):
            raise ConfigError(
                f"{self.dataset_name}: all {len(train['text'])} training {self.noun} are empty or "
                f"whitespace: there is nothing to learn from (check the text column of {where})"
            )

    def _train_tokenizer(self, texts: list[str]):
        settings = (
            self.vocab_size,
            self.min_frequency,
            self.lowercase,
            self.word_split,
            HTML_BREAK,
        )
        return trained_tokenizer(
            self.cache_folder,
            texts,
            settings,
            lambda: train_word_tokenizer(
                texts, self.vocab_size, self.min_frequency, self.lowercase, self.word_split
            ),
        )

    # --- raw text in (predict's examples, the probes) -------------------------------------------
    def encode(self, texts: list[str]) -> dict[str, torch.Tensor]:
        """Raw texts -> a model batch (no labels), exactly as in training."""
        ids = encode_texts(self.tokenizer, texts, self.max_seq_len, self.truncation)
        input_ids, mask = pad_sequences(ids, PAD_ID)
        return {"input_ids": input_ids, "mask": mask}

    def probe_batch(self, num_examples: int = 8) -> dict[str, torch.Tensor] | None:
        if self.tokenizer is None or not self.probes:
            return None
        probes = self.probes[:num_examples]
        batch = self.encode([text for text, _ in probes])
        return {**batch, "labels": torch.tensor([label for _, label in probes])}
