"""A run's machine-readable record, `<run dir>/metrics.json`: the one module that reads and writes
it. Written as the run goes (running -> completed | failed), always in one step, and never over an
earlier attempt's (which a resumed attempt that ends before it saves a checkpoint puts back)."""

import errno
import json
import logging
import os
import platform
import time
import traceback
from datetime import datetime
from pathlib import Path
from typing import Any

import attnexp
from attnexp.files import next_attempt, write_atomically
from attnexp.runs.machine import describe_machine

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
# The checkpoint a resumed attempt goes on from: whether the attempt wrote it tells whether it
# changed the run (see RunRecord.put_back_earlier).
LAST_CKPT = Path("checkpoints") / "last.ckpt"


def read_record(path: Path) -> dict:
    """The record in a metrics.json file. Raises OSError (missing, unreadable) or ValueError (not
    JSON, or JSON that is not an object: edited by hand, another tool's)."""
    record = json.loads(Path(path).read_text())
    if not isinstance(record, dict):
        raise ValueError(f"it holds a JSON {type(record).__name__}, not a run record (an object)")
    return record


def existing_record(run_dir: Path) -> dict:
    """A run dir's record; {} when it has none or it cannot be read."""
    try:
        return read_record(Path(run_dir) / METRICS_FILE)
    except (OSError, ValueError):
        return {}


RESERVE_FILE = ".reserve"  # space held back for the record's last write on a full disk
RESERVE_BYTES = 256 * 1024


def _write_json(path: Path, data: dict) -> None:
    text = json.dumps(data, indent=2, default=str) + "\n"
    try:
        write_atomically(path, lambda partial: partial.write_text(text))
    except OSError as err:
        reserve = path.parent / RESERVE_FILE
        if err.errno != errno.ENOSPC or not reserve.exists():
            raise
        reserve.unlink()  # the disk is full: the space held back takes this write
        write_atomically(path, lambda partial: partial.write_text(text))


def reserve_space(run_dir: Path) -> None:
    """Holds RESERVE_BYTES in the run dir, so that the record can still say how the run ended
    when the disk fills up."""
    try:
        (run_dir / RESERVE_FILE).write_bytes(b"\0" * RESERVE_BYTES)
    except OSError as err:
        log.warning("could not hold back space for the run's record in %s: %s", run_dir, err)


def failure(err: BaseException) -> str:
    """How a run ended, for its record. Lightning ends a Ctrl-C with `sys.exit(1)`, which alone
    would read "SystemExit: 1"."""
    if isinstance(err, KeyboardInterrupt) or (
        isinstance(err, SystemExit) and isinstance(err.__context__, KeyboardInterrupt)
    ):
        return "interrupted (KeyboardInterrupt, Ctrl-C): resume=<this run dir> continues it"
    return f"{type(err).__name__}: {err}"


# What the training callbacks record; under ddp_spawn a worker process writes them to the file.
WORKER_KEYS = ("history", "validations", "best_ckpt", "warnings", "stopped_early", "pruned")
# How a run ended: COMPLETED, PRUNED (an Optuna trial its study's pruner stopped early; its metrics
# are those of its training so far, untested), or FAILED.
COMPLETED, PRUNED, FAILED = "completed", "pruned", "failed"
ENDED_WELL = (COMPLETED, PRUNED)
# What a run's record says of the data it read (train records them once the data are loaded).
DATA_KEYS = ("data_source", "data_dir", "data_fingerprints")


def file_stamp(path: Path) -> tuple[int, int] | None:
    """Size and mtime_ns: whether a file was written since (None: there is none)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


class RunRecord:
    """Keeps `<run_dir>/metrics.json` up to date: running -> completed | failed."""

    def __init__(
        self,
        run_dir: Path,
        seed: int | None,
        overrides: list[str],
        extra: dict | None = None,
        write: bool = True,
    ):
        self.path = Path(run_dir) / METRICS_FILE
        self.write = write  # False in the other ranks of a re-launched DDP/FSDP run: rank 0 writes
        self.started = time.time()
        self.data: dict[str, Any] = {
            "status": "running",
            "metrics": {},
            "history": [],
            "validations": [],
            "data_source": None,
            "device": None,
            "seed": seed,
            "duration_s": None,
            "overrides": list(overrides),
            "version": attnexp.__version__,
            "started_at": datetime.now().isoformat(timespec="seconds"),
            "host": platform.node(),
            "pid": os.getpid(),  # who wrote it; whether it still runs is the lock's to say
            "machine": describe_machine() if write else None,
            "warnings": [],
            **(extra or {}),
        }
        self.earlier_seed: int | None = None  # a resumed run: the seed its earlier attempt ran with
        self.earlier_data: dict[str, Any] = {}  # and the data it read (source, dir, fingerprints)
        self.earlier: Path | None = None  # a resumed run: where the earlier record is kept
        self.resumed_ckpt: tuple[int, int] | None = None  # and the file_stamp of its last.ckpt

    def start(self) -> None:
        if not self.write:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():  # a resumed run: keep what the earlier attempt wrote
            attempt, kept = next_attempt(self.path)
            self.resumed_ckpt = file_stamp(self.path.parent / LAST_CKPT)
            earlier = self.earlier = self.path.rename(kept)
            self.data["resumed_from_attempt"] = attempt
            try:  # the epochs and validations before the interruption stay in the record
                before = read_record(earlier)
                for key in ("history", "validations"):
                    self.data[key] = list(before.get(key, []))
                if before.get("best_ckpt"):  # still the best until this attempt saves a better one
                    self.data["best_ckpt"] = before["best_ckpt"]
                self.earlier_seed = before.get("seed")
                self.earlier_data = {k: before.get(k) for k in DATA_KEYS}
            except (OSError, ValueError) as err:
                log.warning("could not read the history of %s: %s", earlier, err)
        reserve_space(self.path.parent)
        self.save()

    def update(self, **fields: Any) -> None:
        self.data.update(fields)
        self.save()

    def record_best(self, best: str) -> None:
        """`best_ckpt`: the best checkpoint's path, relative to the run dir where it lies in it."""
        path, run_dir = Path(best), self.path.parent
        relative = str(path.relative_to(run_dir)) if path.is_relative_to(run_dir) else best
        if self.data.get("best_ckpt") != relative:
            self.update(best_ckpt=relative)

    def warn(self, message: str) -> None:
        """A decision taken for the user: logged at WARNING and kept in the record (saved at
        once: under ddp_spawn the main process reads a worker's from the file)."""
        log.warning(message)
        self.data["warnings"].append(message)
        self.save()

    def reload(self, *keys: str) -> None:
        """Take `keys` from the file on disk: another process (a DDP worker) may have written them."""
        try:
            on_disk = read_record(self.path)
        except (OSError, ValueError) as err:
            log.warning("cannot re-read %s: %s", self.path, err)
            return
        self.data.update({k: on_disk[k] for k in keys if k in on_disk})

    def save(self) -> None:
        if not self.write:
            return
        self.data["duration_s"] = round(time.time() - self.started, 2)
        _write_json(self.path, self.data)

    def complete(self, metrics: dict[str, float], status: str = COMPLETED) -> None:
        """The run ended well: COMPLETED, or PRUNED."""
        self.update(
            status=status,
            metrics=metrics,
            finished_at=datetime.now().isoformat(timespec="seconds"),
        )
        self.release_reserve()

    def release_reserve(self) -> None:
        if self.write:
            (self.path.parent / RESERVE_FILE).unlink(missing_ok=True)

    def fail(self, err: BaseException) -> None:
        if self.write and self.put_back_earlier(err):
            return
        if self.write:  # ddp_spawn: what the rank-0 worker recorded before the failure stays
            self.reload(*WORKER_KEYS)
        self.update(
            status=FAILED,
            error=failure(err),
            traceback=traceback.format_exc(limit=20),
            finished_at=datetime.now().isoformat(timespec="seconds"),
        )
        self.release_reserve()

    def put_back_earlier(self, err: BaseException) -> bool:
        """A resumed attempt that ends (fails, or is interrupted) before it saves a checkpoint
        leaves the run as it was: the earlier record goes back as metrics.json, with the failure
        added under `failed_resumes`, so a run whose checkpoints the attempt left unchanged reads
        in reports as it did before. Returns whether it did.

        An attempt that saved a checkpoint has changed the run: its failed record stays, and the
        earlier one stays beside it.
        """
        if self.earlier is None or self.resumed_ckpt is None:
            return False
        if file_stamp(self.path.parent / LAST_CKPT) != self.resumed_ckpt:
            return False
        try:
            earlier = read_record(self.earlier)
        except (OSError, ValueError):
            return False  # no record to put back: the failed one says what happened
        failed = {"error": failure(err), "at": datetime.now().isoformat(timespec="seconds")}
        earlier["failed_resumes"] = [*earlier.get("failed_resumes", []), failed]
        _write_json(self.earlier, earlier)
        self.earlier.replace(self.path)
        self.write = False  # metrics.json is the earlier record again, not this attempt's
        log.warning(
            "the resumed attempt ended before it saved a checkpoint, so the run is as it was: "
            "its record is put back as %s, the failure added under failed_resumes",
            self.path,
        )
        return True
