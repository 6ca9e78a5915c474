"""Run directories and their machine-readable record, `metrics.json`.

A run dir is never reused by accident: its name carries the start time and a random suffix, and a
resumed run keeps the earlier record as `metrics.attempt<k>.json` before writing a new one.
"""

import json
import logging
import os
import platform
import time
import traceback
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

import attnexp
from attnexp.errors import ConfigError

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
LAST_CKPT = Path("checkpoints") / "last.ckpt"
RESUME_KEY = "resume"


def new_run_name() -> str:
    """Start time plus a random suffix: two runs started in the same second still differ."""
    return f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{uuid.uuid4().hex[:6]}"


def _without_resume(overrides: list[str]) -> list[str]:
    return sorted(o for o in overrides if not o.lstrip("+~").startswith(f"{RESUME_KEY}="))


def find_resumable(runs_root: Path, overrides: list[str]) -> Path | None:
    """The newest run under `runs_root` with the same overrides (resume= aside) and a last.ckpt."""
    wanted = _without_resume(overrides)
    candidates = []
    for run_dir in runs_root.glob("*"):
        saved = run_dir / ".hydra" / "overrides.yaml"
        if (
            (run_dir / LAST_CKPT).is_file()
            and saved.is_file()
            and _without_resume(yaml.safe_load(saved.read_text()) or []) == wanted
        ):
            candidates.append(run_dir)
    return max(candidates, key=lambda d: (d / LAST_CKPT).stat().st_mtime, default=None)


def resolve_run_dir(resume: str | None, runs_root: str, overrides: list[str]) -> str:
    """hydra.run.dir: a fresh dir, or the dir of the run to resume (`resume=<dir>` or `auto`)."""
    root = Path(runs_root)
    if resume in (None, "", "null", "None"):
        return str(root / new_run_name())
    if resume == "auto":
        found = find_resumable(root, list(overrides))
        if found is None:
            log.warning(
                "resume=auto: no earlier run with these overrides in %s; starting a new run", root
            )
            return str(root / new_run_name())
        return str(found)
    run_dir = Path(resume).expanduser().resolve()
    if not (run_dir / LAST_CKPT).is_file():
        raise ConfigError(
            f"resume={resume}: no {LAST_CKPT} in {run_dir} (give a run dir with a last checkpoint, "
            f"or resume=auto)"
        )
    return str(run_dir)


def hydra_subdir(resume: str | None) -> str:
    """Where Hydra writes the composed config: a resumed run keeps the original `.hydra/`."""
    if resume in (None, "", "null", "None"):
        return ".hydra"
    return f".hydra/resume_{datetime.now():%Y-%m-%d_%H-%M-%S}"


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(path)  # atomic: a reader never sees half a file


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
            "data_source": None,
            "device": None,
            "seed": seed,
            "duration_s": None,
            "overrides": list(overrides),
            "version": attnexp.__version__,
            "started_at": datetime.now().isoformat(timespec="seconds"),
            "host": platform.node(),
            "warnings": [],
            **(extra or {}),
        }

    def start(self) -> None:
        if not self.write:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():  # a resumed run: keep what the earlier attempt wrote
            attempt = 1 + len(list(self.path.parent.glob("metrics.attempt*.json")))
            earlier = self.path.rename(self.path.with_name(f"metrics.attempt{attempt}.json"))
            self.data["resumed_from_attempt"] = attempt
            try:  # the epochs before the interruption stay in the history
                self.data["history"] = list(json.loads(earlier.read_text()).get("history", []))
            except (OSError, ValueError) as err:
                log.warning("could not read the history of %s: %s", earlier, err)
        self.save()

    def update(self, **fields: Any) -> None:
        self.data.update(fields)
        self.save()

    def warn(self, message: str) -> None:
        """A decision taken for the user: logged at WARNING and kept in the record."""
        log.warning(message)
        self.data["warnings"].append(message)

    def reload(self, *keys: str) -> None:
        """Take `keys` from the file on disk: another process (a DDP worker) may have written them."""
        try:
            on_disk = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            log.warning("cannot re-read %s: %s", self.path, err)
            return
        self.data.update({k: on_disk[k] for k in keys if k in on_disk})

    def save(self) -> None:
        if not self.write:
            return
        self.data["duration_s"] = round(time.time() - self.started, 2)
        _write_json(self.path, self.data)

    def complete(self, metrics: dict[str, float]) -> None:
        self.update(
            status="completed",
            metrics=metrics,
            finished_at=datetime.now().isoformat(timespec="seconds"),
        )

    def fail(self, err: BaseException) -> None:
        self.update(
            status="failed",
            error=f"{type(err).__name__}: {err}",
            traceback=traceback.format_exc(limit=20),
            finished_at=datetime.now().isoformat(timespec="seconds"),
        )
