"""What a run dir holds: the run's composed config and overrides (`.hydra/`, written here), its
record (`metrics.json`, record.py's) and checkpoints; and whether a path holds a run or lies
inside one."""

from datetime import datetime
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from attnexp.files import write_atomically
from attnexp.runs.record import METRICS_FILE, existing_record

RUN_CONFIG = Path(".hydra") / "config.yaml"  # the composed config of every run dir
RUN_OVERRIDES = Path(".hydra") / "overrides.yaml"  # the command line's overrides, beside it


def saved_overrides(run_dir: Path) -> list[str] | None:
    """The overrides a run was started with (.hydra/overrides.yaml); None when the file is not
    there or is not a list that YAML can read (edited by hand, cut short)."""
    try:
        saved = yaml.safe_load((run_dir / RUN_OVERRIDES).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if saved is None:  # an empty file: a run started with no overrides
        return []
    return [str(o) for o in saved] if isinstance(saved, list) else None


def write_run_config(
    run_dir: Path, config: DictConfig, hydra_config: DictConfig, overrides: list[str]
) -> Path:
    """Hydra's three files, written by the process that holds the run's lock: `config.yaml` (the
    composed config), `hydra.yaml` and `overrides.yaml`. conf/hydra/default.yaml turns off Hydra's
    own writing, which comes before the job starts: of two runs started at once on one dir, the
    one refused could leave its config beside the other's record. A resumed run keeps the
    original and writes its attempt's beside it, in `.hydra/resume_<time>/`. Returns the folder."""
    folder = run_dir / RUN_CONFIG.parent
    if (run_dir / RUN_CONFIG).is_file():
        folder = folder / f"resume_{datetime.now():%Y-%m-%d_%H-%M-%S}"
    files = {
        RUN_CONFIG.name: config,
        "hydra.yaml": OmegaConf.create({"hydra": hydra_config}),
        RUN_OVERRIDES.name: OmegaConf.create(list(overrides)),
    }
    for name, node in files.items():
        text = OmegaConf.to_yaml(node)
        write_atomically(folder / name, lambda partial, text=text: partial.write_text(text))
    return folder


def holds_run(run_dir: Path) -> bool:
    """Whether a dir holds what a run writes (its record or checkpoints, maybe another
    program's): never written into by a new run."""
    return any((run_dir / name).exists() for name in (METRICS_FILE, "checkpoints"))


def is_run(run_dir: Path) -> bool:
    """Whether a dir is an attnexp run (or evaluation): its record can be read. Another Hydra
    app's dir, with a .hydra/config.yaml and checkpoints/ of its own, is not."""
    return isinstance(existing_record(run_dir).get("status"), str)


def run_holding(path: str | Path) -> Path | None:
    """`path` if it holds a run (or an evaluation), else the run dir it lies inside, if any."""
    path = Path(path).expanduser().resolve()
    if holds_run(path):
        return path
    return next((p for p in path.parents if holds_run(p) and (p / RUN_CONFIG).is_file()), None)
