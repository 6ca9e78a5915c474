"""Multi30k task 1 (Elliott et al. 2016): image captions in English, German and French.

Sources, tried in this order with `data.source=auto`:
- local: `<data_dir>/multi30k/{train,val,test_2016_flickr}.{en,de,fr}.gz` (or without .gz), one
  sentence per line, line i of each language the same caption.
- hub (online only): `bentrevett/multi30k` (en and de only), splits train/validation/test.
No embedded sample. Standard splits: 29,000 / 1,014 / 1,000 captions; one reference each.
"""

from pathlib import Path

from attnexp.data.text import read_lines
from attnexp.data.translation import TranslationDataModule, length_filter
from attnexp.errors import ConfigError

SPLIT_FILES = {"train": "train", "val": "val", "test": "test_2016_flickr"}
HUB_NAME = "bentrevett/multi30k"
HUB_SPLITS = {"train": "train", "val": "validation", "test": "test"}
HUB_LANGUAGES = ("en", "de")


def read_side(folder: Path, stem: str, lang: str) -> list[str]:
    for name in (f"{stem}.{lang}.gz", f"{stem}.{lang}"):
        if (folder / name).is_file():
            return read_lines(folder / name, f"multi30k's {name}")
    raise ConfigError(
        f"multi30k: no {stem}.{lang}.gz in {folder} (put the task-1 files there, or set "
        f"paths.data_dir=<folder holding multi30k/>)"
    )


class Multi30kDataModule(TranslationDataModule):
    """Multi30k captions in any direction among en, de, fr (the hub copy has en and de only)."""

    dataset_name = data_subdir = "multi30k"
    languages = ("en", "de", "fr")
    has_sample = False

    def load_local(self, folder: Path) -> dict[str, list[tuple[str, str]]]:
        splits = {}
        for split, stem in SPLIT_FILES.items():
            src, tgt = read_side(folder, stem, self.src), read_side(folder, stem, self.tgt)
            if len(src) != len(tgt):
                raise ConfigError(
                    f"multi30k: {stem}.{self.src} has {len(src)} lines but {stem}.{self.tgt} has "
                    f"{len(tgt)}: the files must be line-aligned"
                )
            splits[split] = list(zip(src, tgt, strict=True))
        return splits

    def load_hub(self) -> dict[str, list[tuple[str, str]]]:
        import datasets

        missing = [lang for lang in (self.src, self.tgt) if lang not in HUB_LANGUAGES]
        if missing:
            raise ConfigError(
                f"multi30k: the hub copy {HUB_NAME} has no '{missing[0]}' side (put the task-1 "
                f"files in <data_dir>/multi30k/, or set data.src/data.tgt to en and de)"
            )
        splits = {}
        for split, hub_split in HUB_SPLITS.items():
            table = datasets.load_dataset(HUB_NAME, split=hub_split)
            splits[split] = list(zip(table[self.src], table[self.tgt], strict=True))
        return splits

    def split_parts(
        self, raw: dict[str, list[tuple[str, str]]]
    ) -> dict[str, list[tuple[str, str]]]:
        splits = {}
        for split, pairs in raw.items():
            pairs = [(s, t) for s, t in pairs if s.strip() and t.strip()]
            # The length filter trims training only: the test set stays the standard one.
            splits[split] = length_filter(pairs, self.max_tokens) if split == "train" else pairs
            self.summary[f"{split}_pairs_read"] = len(pairs)
        return splits
