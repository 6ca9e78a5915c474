"""The report of a folder of runs (a multirun dir, say), `python -m attnexp.report <dir>`.

Writes into <dir>: `report.csv` (one row per run: its varied settings, status, final metrics),
`report.md` (the runs, and mean +- std over seeds for each variant) and PNG plots (validation
accuracy per epoch for each variant, and BLEU for translation runs; accuracy against bag size for
bag runs). Reads only the
runs' `metrics.json` and `.hydra/`, so it works on incomplete sweeps and on runs still going
(their last epoch is shown and the status says `running` while the run dir's lock is held, or
`killed` where nobody holds it: the process that wrote `running` ended without a word).

Which runs are variants of one another, and which one counts where a seed is repeated: see
`attnexp.runs.collect`.
Evaluation records (`python -m attnexp.evaluate`) are listed apart, not counted as runs.
"""

import csv
import logging
import math
import re
import statistics
from collections import Counter
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
from attnexp.runs.naming import natural_key
from attnexp.runs.record import METRICS_FILE
from attnexp.runs.sweeps import planned_jobs

log = logging.getLogger(__name__)

# Shown in the Markdown tables when present (the CSV has every metric); translation runs' BLEU
# and chrF are those of the task's main decoding (beam, or greedy with decode.beam_size=1).
MAIN_METRICS = (
    *("val/acc_best", "val/acc", "test/acc", "test/acc_variable", "test/f1"),
    *("val/bleu_best", "val/bleu", "test/bleu", "test/chrf", "test/ppl", "test/ppl_free"),
)
# Per-epoch validation plots: (metric, file stem, report.md section title, y-axis label).
VAL_PLOTS = (
    ("val/acc", "val_acc", "Validation accuracy per epoch", "validation accuracy"),
    ("val/bleu", "val_bleu", "Validation BLEU per epoch", "validation BLEU (greedy)"),
)
BAG_METRIC = re.compile(r"^test/acc_bag(\d+)$")
TITLE = "# Report: "  # report.md's first line names the folder of runs it reports on


def metric_columns(runs: list[Run], main_only: bool) -> list[str]:
    present = {k for run in runs for k in run.metrics}
    main = [k for k in MAIN_METRICS if k in present]
    if main_only and main:
        return main
    rest = sorted(present - set(main), key=natural_key)
    return main + rest


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


def group_variants(runs: list[Run]) -> dict[str, list[Run]]:
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.variant_label, []).append(run)
    return groups


def mean_std(values: list[float]) -> str:
    """Over the finite values; NaN or inf ones (a diverged run) are counted beside them."""
    finite = [v for v in values if math.isfinite(v)]
    others = f" (+{len(values) - len(finite)} NaN/inf)" if len(finite) < len(values) else ""
    if not finite:
        return "nan" if values else ""
    if len(finite) == 1:
        return f"{finite[0]:.4f}{others}"
    return f"{statistics.mean(finite):.4f} ± {statistics.stdev(finite):.4f}{others}"


def _fmt(value) -> str:
    if value is None:
        return ""
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _status_cell(status: str) -> str:
    return status if status == "completed" else f"**{status.upper()}**"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def variants_markdown(runs: list[Run]) -> str:
    """Mean +- std over the completed seeds of each variant; failed and running ones counted,
    a repeated seed not (the table says which run is left out)."""
    varied = varied_keys(runs)
    metrics = metric_columns(runs, main_only=True)
    header = [*(varied or ["variant"]), "seeds", "completed", *metrics]
    rows = []
    for label, members in group_variants(runs).items():
        counted = [r for r in members if not r.repeat_of]
        done = [r for r in counted if r.status == "completed"]
        notes = [r.status for r in counted if r.status != "completed"]
        notes += [f"{r.name} repeats seed {r.seed}, not counted" for r in members if r.repeat_of]
        completed = f"{len(done)}/{len(counted)}" + (f" ({', '.join(notes)})" if notes else "")
        seeds = ",".join(_fmt(r.seed) for r in counted)
        keys = [members[0].variant.get(k, "-") for k in varied] if varied else [label]
        cells = [mean_std([r.metrics[m] for r in done if m in r.metrics]) for m in metrics]
        rows.append([*keys, seeds, completed, *cells])
    return markdown_table(header, rows)


def runs_markdown(runs: list[Run]) -> str:
    varied = varied_keys(runs)
    metrics = metric_columns(runs, main_only=True)
    machines = len(machine_counts(runs)) > 1
    header = ["run", "status", "seed", *varied, "epochs", *metrics, "note"]
    header += ["machine"] if machines else []
    rows = []
    for run in runs:
        rows.append(
            [
                run.name,
                _status_cell(run.status),
                _fmt(run.seed),
                *(run.variant.get(k, "-") for k in varied),
                str(len(run.history)),
                *(_fmt(run.metrics.get(m)) for m in metrics),
                run.note,
                *([run.machine] if machines else []),
            ]
        )
    return markdown_table(header, rows)


def machine_counts(runs: list[Run]) -> dict[str, int]:
    return dict(Counter(run.machine for run in runs).most_common())


def machines_markdown(runs: list[Run]) -> str:
    """Where the runs ran. The same config and seed can give a different number on a CPU with
    other vector instructions, or with another torch or thread count, so runs from several
    machines are not exact repeats of each other."""
    counts = machine_counts(runs)
    if len(counts) == 1:
        return f"Machine: {next(iter(counts))}."
    listed = "; ".join(f"{label} ({n} run{'' if n == 1 else 's'})" for label, n in counts.items())
    return (
        f"The runs ran on {len(counts)} machines: {listed}. The same config and seed can give "
        f"another number on another machine (by about as much as another seed)."
    )


def evaluations_markdown(evaluations: list[Run]) -> str:
    metrics = metric_columns(evaluations, main_only=True)
    header = ["record", "status", "evaluated run", DATA_KEY, *metrics, "note"]
    rows = [
        [
            run.name,
            _status_cell(run.status),
            run.evaluated,
            run.settings.get(DATA_KEY, ""),
            *(_fmt(run.metrics.get(m)) for m in metrics),
            run.note,
        ]
        for run in evaluations
    ]
    return markdown_table(header, rows)


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
    from attnexp.viz.report import plot_bag_sizes, plot_val_curves

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
    written: dict[str, Path] = {}

    header, rows = run_rows(runs)
    written["csv"] = out_dir / "report.csv"
    with written["csv"].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)

    for metric, stem, _, label in VAL_PLOTS:
        curves = val_curves(runs, metric)
        if curves:
            written[stem] = plot_val_curves(curves, out_dir / f"{stem}.png", ylabel=label)
    bags = bag_size_curves(runs)
    if bags:
        written["bag_size"] = plot_bag_sizes(bags, out_dir / "acc_vs_bag_size.png")

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
    parts += [
        "",
        "## Variants (mean ± std over seeds, completed runs only)",
        "",
        variants_markdown(runs),
        "",
        "## Runs",
        "",
        runs_markdown(runs),
        "",
    ]
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
    written["markdown"] = out_dir / "report.md"
    written["markdown"].write_text("\n".join(parts))
    return written


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
