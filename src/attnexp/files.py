"""Writing files that other processes may read meanwhile, and keeping earlier attempts' files."""

import itertools
import os
import pathlib
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path

# What torch.load raises for a file that is missing, cut short, or not a torch file.
TORCH_LOAD_ERRORS = (OSError, RuntimeError, KeyError, EOFError, pickle.UnpicklingError)


# What a checkpoint may hold besides tensors and plain values, for torch's weights-only loader:
# inert types that run no code when rebuilt (a Path among Lightning's hyperparameters).
SAFE_GLOBALS = (
    pathlib.PosixPath,
    pathlib.PurePosixPath,
    pathlib.WindowsPath,
    pathlib.PureWindowsPath,
)


def allow_checkpoint_globals() -> None:
    """Lets every weights-only load (ours and Lightning's) rebuild SAFE_GLOBALS."""
    import torch  # not at import: this module also serves the light commands

    torch.serialization.add_safe_globals(list(SAFE_GLOBALS))


def checkpoint_value(path: Path | str, key: str):
    """One top-level entry of a Lightning checkpoint ("epoch", "global_step", ...), memory-mapped
    and weights-only: reads little of a large file, runs none of its code. Raises one of
    TORCH_LOAD_ERRORS for a broken file."""
    import torch

    allow_checkpoint_globals()
    return torch.load(path, map_location="cpu", weights_only=True, mmap=True)[key]


def write_atomically(path: Path, write: Callable[[Path], object]) -> Path:
    """`write(partial)` fills a file beside `path`, which then replaces `path` in one step: a
    reader (a parallel sweep job, a DDP rank, a report) never sees half a file, and a process
    killed while writing leaves no broken one behind (at most a stray `.tmp<pid>` beside it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".tmp{os.getpid()}")
    try:
        write(partial)
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)  # a write that failed leaves nothing half-written
    return path


def next_attempt(path: Path) -> tuple[int, Path]:
    """Where an earlier attempt's `name.ext` is kept: the first free `name.attempt<k>.ext` (never
    one that is there already), with its k."""
    for k in itertools.count(1):
        kept = path.with_name(f"{path.stem}.attempt{k}{path.suffix}")
        if not kept.exists():
            return k, kept
    raise AssertionError("unreachable")


def cannot_make_folders(path: Path) -> tuple[Path, OSError] | None:
    """(the nearest existing folder of `path`, why) when no folder can be made in it (read-only,
    no permission, a virtual file system such as /proc); None when one can. Tried with an empty
    folder, removed at once."""
    path = Path(path).expanduser()
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        return None
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".attnexp-probe-", dir=existing))
    except OSError as err:
        return existing, err
    return None


def not_a_folder(path: Path) -> Path | None:
    """What stops `path` from being used as a folder: `path` itself, or the nearest of its parents
    that exists, when that is a file; None when `path` is a folder or can be made one."""
    path = Path(path).expanduser()
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    return existing if existing is not None and not existing.is_dir() else None
