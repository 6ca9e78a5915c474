"""`python -m attnexp.report <dir>`: compare the runs under a multirun dir (or any folder of runs).

Writes into <dir>: `report.csv` (one row per run: its varied settings, status, final metrics),
`report.md` (the runs, and mean +- std over seeds for each variant) and PNG plots (validation
accuracy per epoch for each variant; accuracy against bag size for bag runs). Reads only the
runs' `metrics.json` and `.hydra/`, so it works on incomplete sweeps and on runs still going
(their last epoch is shown and the status says `running`; `killed` where the process that wrote
`running` is gone from this machine).

A variant is what a run was run with: its overrides, its config group choices and the values of
its composed config (`.hydra/config.yaml`), so `scorer=additive` where additive is the default
is the same variant as no scorer= at all; runs on other data (`data_source`, and the data dir of
local data) are another variant. A (variant, seed) run repeated counts once: the one started
last. Evaluation records (`python -m attnexp.evaluate`) are listed apart, not counted as runs.
"""

import argparse
import csv
import json
import logging
import math
import os
import re
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from attnexp.files import not_a_folder
from attnexp.machine import machine_label
from attnexp.runs import METRICS_FILE, natural_key, writer_alive

log = logging.getLogger(__name__)

# Shown in the Markdown tables when present (the CSV has every metric).
MAIN_METRICS = ("val/acc_best", "val/acc", "test/acc", "test/acc_variable", "test/f1")
NOT_VARIANT = ("seed", "resume", "paths.", "hydra.", "trainer.enable_progress_bar")
DATA_KEY = "data_source"  # the data a run saw: sample | hub | local:<data dir>
EVALUATE = "evaluate"  # metrics.json "kind" of an evaluation record
KILLED = "killed"  # a record left `running` by a process that is gone
_ABSENT = object()
SKIP_DIRS = {"checkpoints", "tb", ".hydra", ".submitit", "__pycache__"}  # never hold run records
BAG_METRIC = re.compile(r"^test/acc_bag(\d+)$")
TITLE = "# Report: "  # report.md's first line names the folder of runs it reports on


@dataclass
class Run:
    """One run dir and what its metrics.json says."""

    path: Path
    name: str
    status: str
    seed: int | None
    settings: dict[str, str]  # key -> value the run was run with (overrides, choices, config)
    metrics: dict[str, float]
    history: list[dict] = field(default_factory=list)
    error: str = ""
    duration_s: float | None = None
    kind: str = "train"
    started_at: str = ""
    config: DictConfig | None = field(default=None, repr=False)  # its composed config
    evaluated: str = ""  # an evaluation record: the run dir it tested
    variant: dict[str, str] = field(default_factory=dict)
    repeat_of: str = ""  # a repeated (variant, seed): the run counted instead of this one
    machine: str = "not recorded"  # what computed it: `machine_label` of its record
    commit: str = ""  # the source commit it ran at, where recorded

    @property
    def variant_label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.variant.items()) or "all runs"

    @property
    def note(self) -> str:
        if self.repeat_of:
            return f"seed {self.seed} repeated: not counted ({self.repeat_of} is)"
        return " ".join(self.error.split())[:200]


def _override_key(key: str) -> str:
    return key.lstrip("+~").rsplit("/", 1)[-1]  # +experiment/bag -> bag


def parse_overrides(lines: list[str]) -> dict[str, str]:
    pairs = (line.partition("=") for line in lines)
    return {_override_key(key): value for key, _, value in pairs}


def _text(value) -> str:
    """A config value as typed on a command line: null, true, 0.001."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return str(value)


def config_value(config: DictConfig | None, key: str) -> str | None:
    """`key`'s value in a composed config; None without one, or where `key` is not a value."""
    if config is None:
        return None
    value = OmegaConf.select(config, key, default=_ABSENT, throw_on_resolution_failure=False)
    return None if value is _ABSENT or isinstance(value, DictConfig) else _text(value)


def _hydra_file(run_dir: Path, name: str) -> DictConfig | None:
    """A run's `.hydra/<name>`: config.yaml is its composed config, hydra.yaml Hydra's own. A
    resumed run's latest attempt has its own (`.hydra/resume_<time>/`): the metrics are that
    attempt's, which may have trained longer (trainer.max_epochs=)."""
    attempts = sorted((run_dir / ".hydra").glob(f"resume_*/{name}"))
    path = attempts[-1] if attempts else run_dir / ".hydra" / name
    if not path.is_file():
        return None
    try:
        return OmegaConf.load(path)
    except (OSError, yaml.YAMLError) as err:
        log.warning("cannot read %s: %s", path, err)
        return None


def _data_label(record: dict, settings: dict[str, str], config: DictConfig | None) -> str:
    """The embedded sample and the hub are the same data everywhere; local data is its dir: the
    absolute one recorded, or (records without it) the one configured, maybe a relative path."""
    source = record["data_source"]
    if source != "local":
        return source
    data_dir = (
        record.get("data_dir")
        or config_value(config, "paths.data_dir")
        or settings.get("paths.data_dir")
    )
    return f"local:{data_dir}" if data_dir else source


def load_run(path: Path, root: Path) -> Run:
    """`path` is a metrics.json; a file that cannot be read gives a row with status `unreadable`."""
    name = str(path.parent.relative_to(root)) if path.parent != root else path.parent.name
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        log.warning("cannot read %s: %s", path, err)
        return Run(path.parent, name, "unreadable", None, {}, {}, error=str(err))
    if not isinstance(record, dict):  # valid JSON, but not a run record
        error = f"holds a JSON {type(record).__name__}, not a run record (an object)"
        log.warning("cannot read %s: %s", path, error)
        return Run(path.parent, name, "unreadable", None, {}, {}, error=error)
    status = record.get("status", "unknown")
    if status == "running" and writer_alive(record) is False:  # it never got to write `failed`
        status = KILLED
    metrics = dict(record.get("metrics") or {})
    history = list(record.get("history") or [])
    if not metrics and history:  # running or failed: the last epoch it finished
        metrics = {k: v for k, v in history[-1].items() if k not in ("epoch", "step")}
    config = _hydra_file(path.parent, "config.yaml")
    settings = parse_overrides(record.get("overrides") or [])
    # The group choices Hydra composed: an explicit default is the same choice as the implicit one.
    # A run that failed before recording them: Hydra wrote them before the job started.
    choices = record.get("choices")
    if choices is None:
        hydra_cfg = _hydra_file(path.parent, "hydra.yaml")
        choices = OmegaConf.select(hydra_cfg, "hydra.runtime.choices") if hydra_cfg else None
    for key, value in (choices or {}).items():
        if not key.startswith("hydra"):
            settings[_override_key(key)] = _text(value)
    if record.get("data_source") is not None:
        settings[DATA_KEY] = _data_label(record, settings, config)
    return Run(
        path=path.parent,
        name=name,
        status=status,
        seed=record.get("seed"),
        settings=settings,
        metrics={k: float(v) for k, v in metrics.items() if isinstance(v, int | float)},
        history=history,
        error=str(record.get("error") or ""),
        duration_s=record.get("duration_s"),
        kind=record.get("kind") or "train",
        started_at=str(record.get("started_at") or ""),
        config=config,
        evaluated=str(record.get("run_dir") or ""),
        machine=machine_label(record.get("machine")),
        commit=str((record.get("machine") or {}).get("commit") or ""),
    )


def find_runs(root: Path) -> list[Run]:
    """Every training run under `root` (a run dir is a folder holding metrics.json)."""
    return find_records(root)[0]


def find_records(root: Path) -> tuple[list[Run], list[Run]]:
    """The training runs under `root`, with their variants, and the evaluation records; each in
    a stable order."""
    paths = sorted(_record_files(root), key=lambda p: natural_key(str(p.relative_to(root))))
    records = [load_run(p, root) for p in paths]
    runs = [run for run in records if run.kind != EVALUATE]
    keys = {k for run in runs for k in run.settings}
    for run in runs:  # a key set in some runs only: the others' value is in their config
        for key in keys:
            value = config_value(run.config, key)
            if value is not None:
                run.settings[key] = value
    varied = varied_keys(runs)
    for run in runs:
        run.variant = {k: run.settings.get(k, "-") for k in varied}
    mark_repeats(runs)
    return runs, [run for run in records if run.kind == EVALUATE]


def mark_repeats(runs: list[Run]) -> None:
    """Runs of one variant with the same seed are not independent: one counts, the completed one
    started last (on a tie, the last listed), or where none completed, the one started last (a
    failed or killed seed run again counts once); the others get `repeat_of`."""
    same: dict[tuple[str, int], list[Run]] = {}
    for run in runs:
        if run.seed is not None:
            same.setdefault((run.variant_label, run.seed), []).append(run)
    for group in same.values():
        completed = [r for r in group if r.status == "completed"]
        counted = sorted(completed or group, key=lambda r: r.started_at)[-1]
        for run in group:
            if run is not counted:
                run.repeat_of = counted.name
                log.warning(
                    "%s repeats seed %s of %s: not counted", run.name, run.seed, counted.name
                )


def _record_files(root: Path) -> list[Path]:
    """Every metrics.json under root, following symlinked run dirs (a hand-picked folder of links
    to runs is a comparison too), each real folder once."""
    found, seen = [], set()
    for folder, subdirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            subdirs[:] = []
            continue
        seen.add(real)
        subdirs[:] = [d for d in subdirs if d not in SKIP_DIRS]
        if METRICS_FILE in files:
            found.append(Path(folder) / METRICS_FILE)
    return found


def varied_keys(runs: list[Run]) -> list[str]:
    """Settings whose value differs between runs (seeds aside): what tells variants apart."""
    keys = sorted({k for run in runs for k in run.settings if not k.startswith(NOT_VARIANT)})
    # A run that failed before loading its data has no data_source: unknown, not other data.
    return [
        k
        for k in keys
        if len({run.settings.get(k) for run in runs if k != DATA_KEY or k in run.settings}) > 1
    ]


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
    header = ["run", "status", "seed", *varied, "epochs", "duration_s", *metrics]
    header += ["error", "repeat_of", "machine", "commit"]
    rows = []
    for run in runs:
        row = {
            "run": run.name,
            "status": run.status,
            "seed": run.seed,
            **run.variant,
            "epochs": len(run.history),
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
    """variant -> one (epoch, value) list per run (running runs too: their epochs so far)."""
    curves: dict[str, list[list[tuple[int, float]]]] = {}
    for run in runs:
        points = [(int(h["epoch"]), float(h[metric])) for h in run.history if metric in h]
        if points:
            curves.setdefault(run.variant_label, []).append(points)
    return curves


def check_out_dir(root: Path, out_dir: Path) -> None:
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
    check_out_dir(root, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}

    header, rows = run_rows(runs)
    written["csv"] = out_dir / "report.csv"
    with written["csv"].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)

    val = val_curves(runs)
    if val:
        written["val_acc"] = plot_val_curves(val, out_dir / "val_acc.png")
    bags = bag_size_curves(runs)
    if bags:
        written["bag_size"] = plot_bag_sizes(bags, out_dir / "acc_vs_bag_size.png")

    by_status = {s: sum(r.status == s for r in runs) for s in sorted({r.status for r in runs})}
    parts = [
        f"{TITLE}{root.resolve()}",
        "",
        f"{len(runs)} runs: " + ", ".join(f"{n} {s}" for s, n in by_status.items()) + ".",
        "Metrics of runs not completed are from their last finished epoch.",
        machines_markdown(runs),
    ]
    if DATA_KEY in runs[0].variant:
        sources = ", ".join(sorted({r.settings[DATA_KEY] for r in runs if DATA_KEY in r.settings}))
        log.warning("the runs saw different data (%s): not averaged together", sources)
        parts.append(
            f"The runs saw different data ({DATA_KEY}: {sources}), never averaged together."
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
    if evaluations:
        title = f"## Evaluation records ({len(evaluations)}, not counted as runs)"
        parts += [title, "", evaluations_markdown(evaluations), ""]
    for key, title in (
        ("val_acc", "Validation accuracy per epoch"),
        ("bag_size", "Test accuracy against bag size"),
    ):
        if key in written:
            parts += [f"## {title}", "", f"![{title}]({written[key].name})", ""]
    written["markdown"] = out_dir / "report.md"
    written["markdown"].write_text("\n".join(parts))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attnexp.report", description=__doc__.splitlines()[0]
    )
    parser.add_argument("dir", type=Path, help="a multirun dir, or any folder holding run dirs")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: DIR)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not args.dir.is_dir():
        print(f"error: {args.dir} is not a directory", file=sys.stderr)
        return 2
    try:
        written = write_report(args.dir, args.out)
    except (FileNotFoundError, FileExistsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(written["markdown"].read_text())
    print("wrote:", *(str(p) for p in written.values()), sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
