"""The report of a folder of runs (a multirun dir, say), `python -m attnexp.report <dir>`.

Writes into <dir>: `report.csv` (one row per run: its varied settings, status, final metrics),
`report.md` (the runs, and mean +- std over seeds for each variant; tables.py) and PNG plots
(validation accuracy per epoch for each variant, and BLEU for translation runs; accuracy against
bag size for bag runs). Reads only the runs' `metrics.json` and `.hydra/`, so it works on
incomplete sweeps and on runs still going (their last epoch is shown and the status says
`running` while the run dir's lock is held, or `killed` where nobody holds it: the process that
wrote `running` ended without a word).

Which runs are variants of one another, and which one counts where a seed is repeated: see
`attnexp.runs.collect`. Evaluation records (`python -m attnexp.evaluate`) are listed apart, not
counted as runs.
"""

import csv
import logging
import math
import re
from pathlib import Path

from attnexp.files import not_a_folder
from attnexp.runs.collect import (
    DATA_KEY,
    Run,
    find_records,
    parse_overrides,
    same_config_variants,
    varied_keys,
)
from attnexp.runs.record import METRICS_FILE
from attnexp.runs.sweeps import planned_jobs
from attnexp.runs.tables import (
    evaluations_markdown,
    machines_markdown,
    metric_columns,
    runs_markdown,
    variants_markdown,
)

log = logging.getLogger(__name__)

# Per-epoch validation plots: (metric, file stem, report.md section title, y-axis label).
VAL_PLOTS = (
    ("val/acc", "val_acc", "Validation accuracy per epoch", "validation accuracy"),
    ("val/bleu", "val_bleu", "Validation BLEU per epoch", "validation BLEU (greedy)"),
)
BAG_METRIC = re.compile(r"^test/acc_bag(\d+)$")
TITLE = "# Report: "  # report.md's first line names the folder of runs it reports on


def run_rows(runs: list[Run]) -> tuple[list[str], list[dict]]:
    """The CSV: one row per run, every metric."""
    varied = varied_keys(runs)
    metrics = metric_columns(runs, main_only=False)
    data = [] if DATA_KEY in varied else [DATA_KEY]  # always a column: sample or full data
    header = ["run", "status", "seed", *varied, *data, "epochs", "stopped_early", "duration_s"]
    header += [*metrics, "error", "repeat_of", "machine", "commit"]
    rows = []
    for run in runs:
        row = {
            "run": run.name,
            "status": run.status,
            "seed": run.seed,
            **run.variant,
            DATA_KEY: run.settings.get(DATA_KEY),
            "epochs": len(run.history),
            "stopped_early": run.stopped_early,  # the epoch, blank for a run not stopped early
            "duration_s": run.duration_s,
            "error": run.error,
            "repeat_of": run.repeat_of,
            "machine": run.machine,
            "commit": run.commit,
        }
        row.update({k: run.metrics.get(k) for k in metrics})
        rows.append(row)
    return header, rows


def bag_size_curves(runs: list[Run]) -> dict[str, dict[int, list[float]]]:
    """variant -> bag size -> test accuracies of its completed runs (test/acc_bag{n}); a repeated
    seed counts once, as in the tables."""
    curves: dict[str, dict[int, list[float]]] = {}
    for run in runs:
        if run.status != "completed" or run.repeat_of:
            continue
        for key, value in run.metrics.items():
            match = BAG_METRIC.match(key)
            if match and math.isfinite(value):
                curves.setdefault(run.variant_label, {}).setdefault(int(match[1]), []).append(value)
    return curves


def val_curves(
    runs: list[Run], metric: str = "val/acc"
) -> dict[str, list[list[tuple[int, float]]]]:
    """variant -> one (epoch, value) list per run (running runs too: their epochs so far); a
    repeated seed is drawn once, as the tables count it."""
    curves: dict[str, list[list[tuple[int, float]]]] = {}
    for run in runs:
        if run.repeat_of:
            continue
        points = [(int(h["epoch"]), float(h[metric])) for h in run.history if metric in h]
        if points:
            curves.setdefault(run.variant_label, []).append(points)
    return curves


def check_report_dir(root: Path, out_dir: Path) -> None:
    """A report is written again for the same folder of runs (it refreshes), never over the
    report of another folder."""
    blocker = not_a_folder(out_dir)
    if blocker is not None:
        raise FileExistsError(
            f"--out {out_dir}: {blocker} is a file, so the report cannot be written there: give a "
            f"folder (--out ...), or leave --out out to write into {root}"
        )
    earlier = out_dir / "report.md"
    if not earlier.is_file():
        return
    title = earlier.read_text().split("\n", 1)[0]
    reported = Path(title.removeprefix(TITLE)).resolve() if title.startswith(TITLE) else None
    if reported != root.resolve():
        raise FileExistsError(
            f"--out {out_dir} holds the report of {reported or 'other runs'}, which this report "
            f"of {root} would overwrite: give a new folder (--out ...), or leave --out out to "
            f"write into {root}"
        )


def write_report(root: Path, out_dir: Path | None = None) -> dict[str, Path]:
    """Write report.csv, report.md and the plots; returns what was written."""
    root = Path(root)
    out_dir = Path(out_dir) if out_dir is not None else root
    runs, evaluations = find_records(root)
    if not runs:
        only = f", only {len(evaluations)} of evaluations" if evaluations else ""
        raise FileNotFoundError(
            f"no {METRICS_FILE} of a training run under {root}{only} (give a multirun dir or a "
            f"folder of run dirs)"
        )
    check_report_dir(root, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {"csv": write_csv(runs, out_dir / "report.csv"), **write_plots(runs, out_dir)}
    written["markdown"] = out_dir / "report.md"
    written["markdown"].write_text(report_markdown(root, runs, evaluations, written))
    return written


def write_csv(runs: list[Run], path: Path) -> Path:
    header, rows = run_rows(runs)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_plots(runs: list[Run], out_dir: Path) -> dict[str, Path]:
    """The validation curves of each `VAL_PLOTS` metric the runs logged, and accuracy against
    bag size for bag runs; keyed by file stem, and `bag_size`."""
    from attnexp.viz.report import plot_bag_sizes, plot_val_curves

    written: dict[str, Path] = {}
    for metric, stem, _, label in VAL_PLOTS:
        curves = val_curves(runs, metric)
        if curves:
            written[stem] = plot_val_curves(curves, out_dir / f"{stem}.png", ylabel=label)
    bags = bag_size_curves(runs)
    if bags:
        written["bag_size"] = plot_bag_sizes(bags, out_dir / "acc_vs_bag_size.png")
    return written


def summary_lines(root: Path, runs: list[Run]) -> list[str]:
    """report.md's head: the folder, the runs by status, where they ran, what data they saw, and
    variants that ran one and the same config."""
    by_status = {s: sum(r.status == s for r in runs) for s in sorted({r.status for r in runs})}
    parts = [
        f"{TITLE}{root.resolve()}",
        "",
        f"{len(runs)} runs: " + ", ".join(f"{n} {s}" for s, n in by_status.items()) + ".",
        machines_markdown(runs),
    ]
    if any(r.status != "completed" for r in runs):
        parts.insert(3, "Metrics of runs not completed are from their last finished epoch.")
    if DATA_KEY in runs[0].variant:
        sources = ", ".join(sorted({r.settings[DATA_KEY] for r in runs if DATA_KEY in r.settings}))
        log.warning("the runs saw different data (%s): not averaged together", sources)
        parts.append(
            f"The runs saw different data ({DATA_KEY}: {sources}), never averaged together."
        )
    else:
        parts.append(data_line(runs))
    for labels in same_config_variants(runs):
        log.warning("variants %s ran one and the same config", " / ".join(labels))
        parts.append(
            f"**One config under {len(labels)} names:** {', '.join(labels)} ran one and the same "
            f"composed config on the same data (a command-line setting overrode what was to set "
            f"them apart), so their rows are one experiment, not {len(labels)}."
        )
    return parts


def report_markdown(
    root: Path, runs: list[Run], evaluations: list[Run], written: dict[str, Path]
) -> str:
    """report.md: the summary, the tables, the jobs that never ran and the plots in `written`."""
    parts = summary_lines(root, runs)
    parts += ["", "## Variants (mean ± std over seeds, completed runs only)", ""]
    parts += [variants_markdown(runs), "", "## Runs", "", runs_markdown(runs), ""]
    never_ran = jobs_never_run(root, runs)
    if never_ran:
        parts[2] += f" Planned but never run: {len(never_ran)} (below)."
        parts += [f"## Jobs that never ran ({len(never_ran)})", ""]
        parts += [f"- `{' '.join(job)}`" for job in never_ran] + [""]
    if evaluations:
        title = f"## Evaluation records ({len(evaluations)}, not counted as runs)"
        parts += [title, "", evaluations_markdown(evaluations), ""]
    for key, title in (
        *((stem, title) for _, stem, title, _ in VAL_PLOTS),
        ("bag_size", "Test accuracy against bag size"),
    ):
        if key in written:
            parts += [f"## {title}", "", f"![{title}]({written[key].name})", ""]
    return "\n".join(parts)


def jobs_never_run(root: Path, runs: list[Run]) -> list[list[str]]:
    """The jobs a sweep in `root` planned that left no record (a sweep killed before them)."""
    planned = planned_jobs(root) or []
    ran = [run.settings for run in runs]
    return [
        job
        for job in planned
        if not any(all(s.get(k) == v for k, v in parse_overrides(job).items()) for s in ran)
    ]


def data_line(runs: list[Run]) -> str:
    """What the runs read, said when they all read the same: tables from the embedded sample
    look like results otherwise."""
    source = next((r.settings[DATA_KEY] for r in runs if DATA_KEY in r.settings), None)
    if source is None:
        return "Data: not recorded."
    if source == "sample":
        return (
            "Data: the package's embedded sample, not the full dataset: these numbers try the "
            "tool out and are not results (give paths.data_dir=<data> for real runs)."
        )
    return f"Data: {source}."
