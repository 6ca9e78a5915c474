"""The caches under `data.cache_dir` (null: `$ATTNEXP_CACHE`, else `~/.cache/attnexp`): each
dataset's folder, trained tokenizers and token ids, keyed by a hash of everything that changes
them (`attnexp.data.text.texts_hash`). A broken cache file is a cache miss (`cached`)."""

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import torch
from tokenizers import Tokenizer

from attnexp.data.text import load_tokenizer, texts_hash
from attnexp.errors import ConfigError
from attnexp.files import not_a_folder, write_atomically

log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    return Path(os.environ.get("ATTNEXP_CACHE", "~/.cache/attnexp")).expanduser()


def cache_folder(cache_dir: str | None, data_subdir: str) -> Path:
    """`<cache_dir>/<data_subdir>/`, the dataset's cache folder (cache_dir null: the default)."""
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    blocker = not_a_folder(root)
    if blocker is not None:
        raise ConfigError(
            f"data.cache_dir={root}: {blocker} is a file, so the caches cannot go there "
            f"(set data.cache_dir=<a folder>)"
        )
    return root / data_subdir


Cached = TypeVar("Cached")


def cached(
    path: Path,
    build: Callable[[], Cached],
    read: Callable[[Path], Cached],
    write: Callable[[Cached, Path], object],
    what: str,
) -> Cached:
    """What `read` gives for the cache file `path`, else `build()`, written there atomically. A
    file `read` cannot read (cut short, emptied) is a cache miss, said at WARNING."""
    if path.is_file():
        try:
            value = read(path)
        except Exception as err:  # tokenizers, torch and pyarrow raise many types for a bad file
            log.warning("building the %s again: the cached one is broken (%s: %s)", what, path, err)
        else:
            log.info("%s from cache %s", what, path)
            return value
    value = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, lambda partial: write(value, partial))
    return value


def fitting_flat_ids(flat: dict, rows: int) -> dict:
    """A token-id cache's tensors (`lengths`, one per row, and `ids` with any other per-token
    column laid end to end), refused with a ValueError (`cached` then builds it again) unless
    they hold `rows` rows of `lengths.sum()` tokens each column: a cache file of other texts
    under this name (copied in, edited) would give rows that belong to no text."""
    lengths = flat["lengths"]
    total = int(lengths.sum())
    columns = {key: value.numel() for key, value in flat.items() if key != "lengths"}
    if len(lengths) != rows or any(count != total for count in columns.values()):
        raise ValueError(
            f"it holds {len(lengths)} rows ({total} tokens; columns {columns}), not the {rows} "
            f"rows of these texts"
        )
    return flat


def trained_tokenizer(
    folder: Path, texts: Sequence[str], settings: tuple, train: Callable[[], Tokenizer]
) -> Tokenizer:
    """`train()`'s tokenizer for `texts`, cached in `folder` under a hash of the texts and the
    `settings` that change it."""
    path = folder / f"tokenizer-{texts_hash(texts, *settings)}.json"
    return cached(
        path,
        train,
        lambda file: load_tokenizer(file),
        lambda tokenizer, file: tokenizer.save(str(file)),
        "tokenizer",
    )


def cached_flat_ids(
    path: Path, build: Callable[[], dict[str, torch.Tensor]], rows: int, what: str
) -> dict[str, torch.Tensor]:
    """A token-id cache file of `rows` rows laid end to end (see `fitting_flat_ids`): read with
    `torch.load`, else `build()` and written there."""
    return cached(
        path,
        build,
        lambda file: fitting_flat_ids(torch.load(file, weights_only=True), rows),
        lambda value, file: torch.save(value, file),
        what,
    )
