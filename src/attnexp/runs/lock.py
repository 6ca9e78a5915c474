"""One process at a time works in a run dir: an OS file lock (`filelock`) held for as long as it
does, with the owner's pid and host written beside it for whoever is refused."""

import json
import os
import platform
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from attnexp.errors import ConfigError

LOCK_FILE = ".lock"
OWNER_FILE = ".lock.owner"


def owner_of(run_dir: Path) -> str:
    """Who holds `run_dir`'s lock, as its owner file says ("another process" if unreadable)."""
    try:
        owner = json.loads((run_dir / OWNER_FILE).read_text())
        return f"process {owner['pid']} on {owner['host']} ({owner['command']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


def lock_held(run_dir: Path | str) -> bool | None:
    """Whether a process holds `run_dir`'s lock now (tried without waiting, and let go at once):
    what tells a run at work from one killed before it could write `failed`, whatever became of
    its pid (a pid is reused by new processes). None where that cannot be told: a lock file this
    user may not open."""
    path = Path(run_dir) / LOCK_FILE
    if not path.is_file():  # never locked: nobody holds it
        return False
    lock = FileLock(path, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return True
    except OSError:
        return None
    lock.release()
    return False


@contextmanager
def owning(run_dir: Path | str, command: str) -> Iterator[None]:
    """Holds `run_dir` for this process inside the block; raises ConfigError, at once, when
    another process holds it. The OS drops the lock when its process dies, even by kill -9, so a
    run dir is never left locked."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(run_dir / LOCK_FILE, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise ConfigError(
            f"{run_dir} is in use by {owner_of(run_dir)}: one process at a time works in a run "
            f"dir (wait for it to end, or stop it, then run the command again)"
        ) from None
    owner = {"pid": os.getpid(), "host": platform.node(), "command": command}
    try:
        (run_dir / OWNER_FILE).write_text(json.dumps(owner) + "\n")
        yield
    finally:
        (run_dir / OWNER_FILE).unlink(missing_ok=True)
        lock.release()
