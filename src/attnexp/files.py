"""Writing files that other processes may read meanwhile, and keeping earlier attempts' files."""

import itertools
import os
from collections.abc import Callable
from pathlib import Path


def write_atomically(path: Path, write: Callable[[Path], object]) -> Path:
    """`write(partial)` fills a file beside `path`, which then replaces `path` in one step: a
    reader (a parallel sweep job, a DDP rank, a report) never sees half a file, and a process
    killed while writing leaves no broken one behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".tmp{os.getpid()}")
    write(partial)
    partial.replace(path)
    return path


def next_attempt(path: Path) -> tuple[int, Path]:
    """Where an earlier attempt's `name.ext` is kept: the first free `name.attempt<k>.ext` (never
    one that is there already), with its k."""
    for k in itertools.count(1):
        kept = path.with_name(f"{path.stem}.attempt{k}{path.suffix}")
        if not kept.exists():
            return k, kept
    raise AssertionError("unreachable")
