"""ckpt_path=<a folder of runs>: each completed run loaded for the same inputs, each with a folder
of its own for its figures."""

import logging
from pathlib import Path

from omegaconf import DictConfig

from attnexp.errors import ConfigError
from attnexp.runner.predict.loading import LoadedRun, load_predictor
from attnexp.runs.collect import EVALUATE, Run, read_records
from attnexp.runs.layout import run_holding
from attnexp.runs.record import METRICS_FILE

log = logging.getLogger(__name__)


def runs_to_compare(path: Path) -> list[Run] | None:
    """Each completed training run under `path`, a folder that is not a run (a multirun dir,
    say); None where `path` is a checkpoint or a run (or lies inside one)."""
    if not path.is_dir() or run_holding(path) is not None:
        return None
    found = [run for run in read_records(path) if run.kind != EVALUATE]
    if not found:
        raise ConfigError(
            f"ckpt_path={path} holds no run (no run's {METRICS_FILE} below it, nor a "
            f"checkpoints/ folder): give a .ckpt file, a run dir, or a folder of runs"
        )
    completed = [run for run in found if run.status == "completed"]
    for run in found:
        if run.status != "completed":
            log.warning("%s: left out of the comparison (status %s)", run.name, run.status)
    if not completed:
        raise ConfigError(
            f"ckpt_path={path}: none of its {len(found)} run(s) completed (give a folder holding "
            f"completed runs, or one run's dir)"
        )
    return completed


def load_compared(
    cfg: DictConfig, raw: dict[str, str], lines: list[str] | None, runs: list[Run]
) -> dict[str, LoadedRun]:
    """Each run loaded for the same inputs, by name, before anything is written: one refused
    refuses the comparison."""
    # what is wrong with the command itself is said as such, not as the first run's refusal
    if not raw and not lines:
        empty = "" if lines is None else f" (texts_file={cfg.texts_file} holds no lines)"
        raise ConfigError(
            f"nothing to predict{empty}: give the runs' inputs (text=..., or text_a=... "
            f"text_b=... for pair models) or texts_file=<file>; ckpt_path={cfg.ckpt_path} reads "
            f"the same inputs with every run"
        )
    predictors = {}
    for run in runs:
        try:
            predictors[run.name] = load_predictor(cfg, raw, lines, run.path)
        except ConfigError as err:
            raise ConfigError(
                f"{run.name}: {err}; ckpt_path={cfg.ckpt_path} compares every completed run "
                f"under it and one refused stops them all (where only this run is refused, "
                f"give a folder without it)"
            ) from err
    return predictors


def run_caption(run: Run) -> str:
    """What compare.html says of a run beside its name: its test BLEU (a translation run: its
    test/acc is a token accuracy), else its test accuracy, as its record has it."""
    for key in ("test/bleu", "test/acc"):
        if key in run.metrics:
            return f"{key} {run.metrics[key]:.4f}"
    return ""


def figure_folders(run_names: list[str]) -> dict[str, str]:
    """Each run's folder for its figures, one level below out_dir (check_figure_folders: a new
    one): its name, a run 3 levels down as `a__b__c`; a name that comes out as an earlier run's
    (`a/b` and `a__b`) gets `~2` after it, so no run's figures replace another's."""
    folders: dict[str, str] = {}
    for name in run_names:
        folder = base = name.replace("/", "__")
        n = 1
        while folder in folders.values():
            n += 1
            folder = f"{base}~{n}"
        folders[name] = folder
    return folders
