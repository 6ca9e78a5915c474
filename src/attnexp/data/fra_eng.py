"""English-French sentence pairs from Tatoeba (manythings.org/anki, the d2l.ai copy).

Sources, tried in this order with `data.source=auto`:
- local: `<data_dir>/fra-eng/fra.txt`, one pair per line: English<TAB>French[<TAB>attribution].
- hub (online only): the d2l.ai archive `fra-eng.zip`, downloaded into the cache folder.
- sample: the first 5,000 pairs, shipped in the package with their CC-BY attribution (WARNING).
  It holds about 2,800 distinct sources, fewer than the full file's default 1,000 + 2,000 held
  out: on the sample, val_sources and test_sources are capped at 10% and 20% of its distinct
  sources (WARNING, recorded), so a bare run works and still trains on most of it.

The split is by source sentence: the file holds many translations of one sentence ("Go." has
several), so a random split of pairs would test on sources seen in training. Distinct sources are
drawn into test and validation with a fixed `split_seed`; a held-out source whose case- and
punctuation-free form occurs among the training sources is dropped (counted in the summary).
`train_head=N` is d2l's protocol: train on the first N pairs of the file; the held-out sources are
drawn from the rest.
"""

import logging
import random
import zipfile
from pathlib import Path

from attnexp.data.base import check_settings
from attnexp.data.sources import sample_path
from attnexp.data.text import read_lines
from attnexp.data.translation import TranslationDataModule, length_filter
from attnexp.data.translation_text import normalize_sentence, overlap_key
from attnexp.errors import ConfigError

log = logging.getLogger(__name__)

FILE_NAME = "fra.txt"
SAMPLE_NAME = "fra_eng_sample.txt"
DOWNLOAD_URL = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
SAMPLE_HELD_OUT = {"val_sources": 0.1, "test_sources": 0.2}  # caps, as shares of its sources


def read_fra(path: Path) -> list[tuple[str, str]]:
    """(English, French) pairs; an attribution column is ignored, a line without a tab refused."""
    pairs = []
    for number, line in enumerate(read_lines(path, "fra.txt"), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2 or not fields[0].strip() or not fields[1].strip():
            raise ConfigError(
                f"{path}:{number}: expected English<TAB>French[<TAB>attribution], found {line[:80]!r}"
            )
        pairs.append((fields[0], fields[1]))
    if not pairs:
        raise ConfigError(f"{path}: no sentence pairs in the file")
    return pairs


def download_fra(cache_dir: Path) -> list[tuple[str, str]]:
    """fra.txt from the d2l.ai archive (cannot run offline; `source=auto` then falls back)."""
    import urllib.request

    folder = cache_dir / "fra-eng"
    target = folder / FILE_NAME
    if not target.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        archive = folder / "fra-eng.zip"
        log.info("downloading %s", DOWNLOAD_URL)
        urllib.request.urlretrieve(DOWNLOAD_URL, archive)
        with zipfile.ZipFile(archive) as zipped:
            member = next(n for n in zipped.namelist() if n.endswith(FILE_NAME))
            target.write_bytes(zipped.read(member))
    return read_fra(target)


def split_by_source(
    pairs: list[tuple[str, str]],
    val_sources: int,
    test_sources: int,
    split_seed: int,
    train_head: int | None = None,
) -> tuple[dict[str, list[tuple[str, str]]], dict[str, int]]:
    """Train/val/test pairs with no source in two splits; returns (splits, counts for the record).

    Sources are compared normalised (no-break spaces); the overlap check compares them also
    without case and punctuation, and drops such held-out sources.
    """
    by_source: dict[str, list[tuple[str, str]]] = {}
    for pair in pairs:
        by_source.setdefault(normalize_sentence(pair[0]), []).append(pair)
    if train_head is not None:
        train_pairs = pairs[:train_head]
        train_keys = {normalize_sentence(s) for s, _ in train_pairs}
        held_out = [k for k in by_source if k not in train_keys]
    else:
        held_out = list(by_source)
    if train_head is not None and not held_out:
        raise ConfigError(
            f"fra-eng: data.train_head={train_head} trains on the first {min(train_head, len(pairs))} "
            f"of the {len(pairs)} pairs (after the data.max_tokens length filter), whose sources "
            f"are all the sources there are: none is left to hold out for validation and test "
            f"(set data.train_head below {len(pairs)}, e.g. d2l's 600; null: hold out sources "
            f"from the whole file)"
        )
    if len(held_out) <= (0 if train_head is not None else test_sources + val_sources):
        raise ConfigError(
            f"fra-eng: {len(held_out)} distinct sources cannot give {test_sources} test and "
            f"{val_sources} validation sources and leave some to train on (set data.test_sources=... "
            f"and data.val_sources=... lower, or give more data)"
        )
    random.Random(split_seed).shuffle(held_out)
    test_keys = held_out[:test_sources]
    val_keys = held_out[test_sources : test_sources + val_sources]
    if train_head is None:
        train_keys = set(held_out[test_sources + val_sources :])
        train_pairs = [p for p in pairs if normalize_sentence(p[0]) in train_keys]
    seen = {overlap_key(k) for k in train_keys}
    counts = {"held_out_sources_drawn": len(test_keys) + len(val_keys)}
    splits = {"train": train_pairs}
    for name, keys in (("val", val_keys), ("test", test_keys)):
        kept = [k for k in keys if overlap_key(k) not in seen]
        counts[f"{name}_sources_dropped_as_seen_in_train"] = len(keys) - len(kept)
        splits[name] = [p for k in kept for p in by_source[k]]
    counts["test_sources_in_train"] = len(
        {normalize_sentence(s) for s, _ in splits["test"]} & set(train_keys)
    )
    return splits, counts


class FraEngDataModule(TranslationDataModule):
    """Tatoeba English-French pairs, split by source (see the module docstring).

    Args (besides TranslationDataModule's):
        val_sources, test_sources: distinct held-out sources drawn for validation and test.
        split_seed: fixed, so every run seed tests on the same sources (null: the run's seed).
        train_head: train on the first N pairs of the file (d2l's 600); null: every other source.
    """

    dataset_name = data_subdir = "fra-eng"
    languages = ("en", "fr")

    def __init__(
        self,
        *args,
        val_sources: int = 1000,
        test_sources: int = 2000,
        split_seed: int | None = 0,
        train_head: int | None = None,
        **kwargs,
    ) -> None:
        check_settings(
            val_sources=val_sources,
            test_sources=test_sources,
            split_seed=split_seed,
            train_head=train_head,
        )
        super().__init__(*args, **kwargs)
        self.val_sources, self.test_sources, self.train_head = val_sources, test_sources, train_head
        self.split_seed = self.seed if split_seed is None else split_seed

    def load_local(self, folder: Path) -> list[tuple[str, str]]:
        path = folder / FILE_NAME
        if not path.is_file():
            raise ConfigError(
                f"fra-eng: no {FILE_NAME} in {folder} (put the manythings/d2l fra.txt there, "
                f"English<TAB>French per line, or set paths.data_dir=<folder holding fra-eng/>)"
            )
        return read_fra(path)

    def load_hub(self) -> list[tuple[str, str]]:
        return download_fra(self.cache_folder.parent)  # the cache root: <cache_dir>/fra-eng/

    def load_sample(self) -> list[tuple[str, str]]:
        return read_fra(sample_path(SAMPLE_NAME))

    def split_parts(self, pairs: list[tuple[str, str]]) -> dict[str, list[tuple[str, str]]]:
        if self.source == "sample":
            self.note(
                f"fra-eng: the embedded sample ({len(pairs)} short pairs, CC-BY 2.0 Tatoeba / "
                f"manythings.org), not the full fra.txt"
            )
        if self.src == "fr":
            pairs = [(fr, en) for en, fr in pairs]
        kept = length_filter(pairs, self.max_tokens)
        sizes = {"val_sources": self.val_sources, "test_sources": self.test_sources}
        if self.source == "sample":
            sizes = self._sample_sizes(kept, sizes)
        splits, counts = split_by_source(
            kept, sizes["val_sources"], sizes["test_sources"], self.split_seed, self.train_head
        )
        self.summary.update(pairs_read=len(pairs), pairs_after_length_filter=len(kept), **counts)
        if counts["test_sources_in_train"]:
            raise RuntimeError(
                f"split by source left {counts['test_sources_in_train']} test sources in train"
            )
        return splits

    def _sample_sizes(self, pairs: list[tuple[str, str]], sizes: dict[str, int]) -> dict[str, int]:
        """The held-out sizes capped to the sample's shares (SAMPLE_HELD_OUT); a cap is noted."""
        distinct = len({normalize_sentence(source) for source, _ in pairs})
        capped = {k: min(v, max(1, int(distinct * SAMPLE_HELD_OUT[k]))) for k, v in sizes.items()}
        if capped != sizes:
            asked = ", ".join(f"data.{k}={v}" for k, v in sizes.items())
            used = " and ".join(f"{v} {k.split('_')[0]}" for k, v in capped.items())
            shares = " and ".join(f"{share:.0%}" for share in SAMPLE_HELD_OUT.values())
            self.note(
                f"fra-eng: the embedded sample has {distinct} distinct sources, too few for "
                f"{asked}: holding out {used} sources (at most {shares} of them; set "
                f"data.val_sources / data.test_sources lower to choose)"
            )
        return capped
