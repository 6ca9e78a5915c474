"""IMDB movie reviews (Maas et al. 2011): binary sentiment, 25k train / 25k test.

Sources (`data.source=auto` tries them in order): `<data_dir>/imdb/{train,test}.parquet` (columns
`text`, `label`) or the original `aclImdb/{train,test}/{pos,neg}/*.txt` layout under
`<data_dir>/imdb/`; the HF hub (`stanfordnlp/imdb`); the embedded sample (2,000 balanced reviews
drawn from the official train split: 1,600 train + 400 test, WARNING, `data_source: sample`).

Splits: validation = `val_fraction` (default 0.1: 2,500 reviews) of the training set, stratified by
label (local copies are sorted by label) and drawn from `data.seed`, which follows the run's `seed`
(so each seed has its own split, vocabulary and training set; `data.split_seed=0` keeps one split for
every run seed); train = the other 22,500; test = the official 25,000. `val_split` picks the held-out reviews one by one ("random") or in runs of
`val_block` consecutive review ids ("blocks"): aclImdb numbers the reviews of a movie consecutively,
so runs keep most validation movies out of training, as the official test set keeps all of its
movies out.
`val_from=test` carves the validation reviews out of the test set instead (with `val_fraction=0.5`,
the split of a PyTorch port of the nndl chapter's code: train on all 25,000, validate on half of the
test reviews, test on the other half). Tokenizer, token-id cache, batches and figures: see
`attnexp.data.text_classification`.
"""

import logging
import re
from pathlib import Path
from typing import Any

from attnexp.data.base import check_settings
from attnexp.data.splits import Split
from attnexp.data.text import not_utf8
from attnexp.data.text_classification import SPLITS, TextClassificationDataModule
from attnexp.errors import ConfigError

log = logging.getLogger(__name__)

REVIEW_FILE = re.compile(r"(\d+)_\d+\.txt")  # aclImdb's `<id>_<rating>.txt`


def _review_files(folder: Path) -> list[Path]:
    """The reviews in an aclImdb label folder, by id: 0, 1, 2, ... (the order of the parquet
    copies), not 0, 1, 10, 100, ... Other files (a README.txt, say) are not reviews."""
    files, others = [], []
    for path in folder.glob("*.txt"):
        (files if REVIEW_FILE.fullmatch(path.name) else others).append(path)
    if others:
        log.warning(
            "IMDB: %d file(s) in %s are not named <id>_<rating>.txt, so not read as reviews: %s",
            len(others),
            folder,
            ", ".join(sorted(p.name for p in others)[:3]),
        )
    return sorted(files, key=lambda p: int(REVIEW_FILE.fullmatch(p.name)[1]))


def _read_acl_folder(folder: Path) -> Split:
    texts, labels = [], []
    for label, name in enumerate(("neg", "pos")):
        files = _review_files(folder / name)
        if not files:
            raise ConfigError(
                f"IMDB: no reviews (<id>_<rating>.txt) in {folder / name} (aclImdb layout)"
            )
        for file in files:
            try:
                texts.append(file.read_text(encoding="utf-8"))
            except UnicodeDecodeError as err:
                raise not_utf8(file, err, "IMDB reviews") from err
        labels += [label] * len(files)
    return {"text": texts, "label": labels}


class IMDBDataModule(TextClassificationDataModule):
    """Args (the others: see `TextClassificationDataModule`):
    val_split: "random" (single reviews) or "blocks" (runs of `val_block` consecutive reviews:
        mostly other movies than the training reviews'; needs the reviews in aclImdb id order, as
        the local parquet and aclImdb copies are).
    val_block: reviews per held-out run with val_split=blocks (a movie has at most 30 reviews of
        a label; in the training parquet two reviews 20 ids apart share no more rare words than
        two random reviews do).
    val_from: the split the validation reviews are carved from: "train" (default) or "test" (then
        all training reviews train, and the test metrics cover the rest of the test set only).
    """

    dataset_name = "IMDB"
    data_subdir = "imdb"
    labels = ("negative", "positive")
    noun = "reviews"
    hub_name = "stanfordnlp/imdb"
    sample_file = "imdb_sample.parquet"
    # Fixed probe reviews whose attention is drawn every validation epoch (label 1 = positive).
    probes = (
        ("this great science fiction film is really awesome", 1),
        ("the plot was boring and the acting was terrible", 0),
        ("i loved every minute of it , a wonderful cast", 1),
        ("a waste of time . worst movie i have ever seen", 0),
        ("not bad at all , i would watch it again", 1),
        ("the story is dull , predictable and far too long", 0),
        ("beautiful photography and a moving , brilliant score", 1),
        ("i wanted to like it but it was just awful", 0),
    )

    def __init__(
        self,
        data_dir: str,
        *,
        val_split: str = "random",
        val_block: int = 250,
        val_from: str = "train",
        **kwargs: Any,
    ) -> None:
        check_settings(val_split=val_split, val_block=val_block, val_from=val_from)
        super().__init__(data_dir, **kwargs)
        self.val_split, self.val_block, self.val_from = val_split, val_block, val_from

    def load_local(self, folder: Path) -> dict[str, Split]:
        if all((folder / f"{s}.parquet").is_file() for s in SPLITS):
            return super().load_local(folder)
        for root in (folder / "aclImdb", folder):
            if (root / "train" / "pos").is_dir() and (root / "test" / "pos").is_dir():
                return {s: _read_acl_folder(root / s) for s in SPLITS}
        raise ConfigError(
            f"IMDB: {folder} holds neither train.parquet + test.parquet nor an aclImdb/ folder "
            f"(put the files there, or set paths.data_dir=... / data.source=sample)"
        )

    def split_parts(self, raw: dict[str, Split]) -> dict[str, Split]:
        block = self.val_block if self.val_split == "blocks" else 1
        parts = self.carve_validation(raw, self.val_from, block)
        if self.val_from == "test":
            log.warning(
                "IMDB: data.val_from=test: validation takes %d of the %d test reviews; the test "
                "metrics cover the other %d only",
                len(parts["val"]["label"]),
                len(raw["test"]["label"]),
                len(parts["test"]["label"]),
            )
        return parts
