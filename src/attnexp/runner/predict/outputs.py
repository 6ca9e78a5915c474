"""The output guard of predict: its outputs go to a folder of their own, never over earlier
outputs and never into a training run."""

import os
from collections.abc import Iterable
from pathlib import Path

from attnexp.errors import ConfigError
from attnexp.files import not_a_folder
from attnexp.runs.layout import holds_run, run_holding

PREDICTIONS_FILE = "predictions.jsonl"
COMPARE_FILE = "compare.html"  # ckpt_path=<a folder of runs>: every run's attention side by side
FRESH_FOLDER = "drop out_dir= for a fresh one under paths.log_dir/predictions"


def check_prediction_dir(out_dir: Path, given: bool) -> None:
    """Predictions go to a folder of their own: never over an earlier prediction's files, never
    into a training run (its dir or a folder below it), where they would mix with the run's.
    `given`: out_dir= was set (else it is the default one under paths.log_dir)."""
    out_dir = out_dir.expanduser().resolve()
    blocker = not_a_folder(out_dir)
    if blocker is not None:
        raise ConfigError(
            f"out_dir={out_dir}: {blocker} is a file, so predictions cannot be written there "
            f"(give a new folder, out_dir=..., or set paths.log_dir=<a folder> for the default one)"
        )
    run_dir = run_holding(out_dir)
    if run_dir is not None:
        advice = (
            f"give a folder outside it (out_dir=...), or {FRESH_FOLDER}"
            if given
            else "set paths.log_dir=<a folder outside runs>, or give out_dir=<a folder outside it>"
        )
        whose = "" if given else " (the default one, under paths.log_dir)"
        raise ConfigError(
            f"out_dir={out_dir}{whose} is in the run {run_dir}; predict does not write into runs: "
            f"{advice}"
        )
    earlier = [
        str(p.relative_to(out_dir))
        for p in (
            out_dir / PREDICTIONS_FILE,
            out_dir / COMPARE_FILE,
            *out_dir.glob("example[0-9]*"),
        )
        if os.path.lexists(p)  # a dangling link too: written through, it would make its target
    ]
    if earlier:
        raise ConfigError(
            f"out_dir={out_dir} already holds predict outputs ({', '.join(sorted(earlier)[:3])}), "
            f"which this prediction would overwrite: give a new folder (out_dir=...), or "
            f"{FRESH_FOLDER}"
        )


def check_figure_folders(out_dir: Path, folders: Iterable[str]) -> None:
    """A comparison's figure folders, named after its runs, must be new: out_dir the folder of
    runs itself put figures into the runs, and an interrupted comparison's figures would be
    drawn over."""
    out_dir = out_dir.expanduser().resolve()
    there = [folder for folder in folders if os.path.lexists(out_dir / folder)]  # links too
    if there:
        runs = " (runs)" if all(holds_run(out_dir / folder) for folder in there) else ""
        raise ConfigError(
            f"out_dir={out_dir} already holds {', '.join(there[:3])}{runs}: each run's figures go "
            f"to <out_dir>/<run name>/, a new folder; give a folder that holds none of the runs' "
            f"names (out_dir=...), or {FRESH_FOLDER}"
        )
