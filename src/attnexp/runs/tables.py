"""The Markdown tables of a report (`attnexp.runs.report`): the variants (mean +- std over
seeds), the runs, the evaluation records, and the machines the runs ran on."""

import math
import statistics
from collections import Counter

from attnexp.runs.collect import DATA_KEY, Run, varied_keys
from attnexp.runs.naming import natural_key

# Shown in the Markdown tables when present (the CSV has every metric); translation runs' BLEU
# and chrF are those of the task's main decoding (beam, or greedy with decode.beam_size=1).
MAIN_METRICS = (
    *("val/acc_best", "val/acc", "test/acc", "test/acc_variable", "test/f1"),
    *("val/bleu_best", "val/bleu", "test/bleu", "test/chrf", "test/ppl", "test/ppl_free"),
)


def metric_columns(runs: list[Run], main_only: bool) -> list[str]:
    present = {k for run in runs for k in run.metrics}
    main = [k for k in MAIN_METRICS if k in present]
    if main_only and main:
        return main
    rest = sorted(present - set(main), key=natural_key)
    return main + rest


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
