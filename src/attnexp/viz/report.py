"""Comparison plots for `python -m attnexp.report` (matplotlib Figures, no pyplot state)."""

import statistics
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

COLORS = [f"C{i}" for i in range(10)]
LINESTYLES = ["-", "--", ":", "-."]  # beyond 10 variants, colours repeat with another line style


def variant_style(i: int) -> dict[str, str]:
    """The colour and line style of the i-th variant: distinct for the first 40."""
    return {"color": COLORS[i % len(COLORS)], "linestyle": LINESTYLES[i // len(COLORS) % 4]}


def plot_val_curves(
    curves: dict[str, list[list[tuple[int, float]]]],
    path: Path,
    ylabel: str = "validation accuracy",
) -> Path:
    """One colour per variant, one line per run (seed); x = epoch (0-based, as logged)."""
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for i, (label, runs) in enumerate(curves.items()):
        style = variant_style(i)
        for j, points in enumerate(runs):
            epochs, values = zip(*sorted(points), strict=True)
            ax.plot(
                epochs,
                values,
                **style,
                marker="o",
                markersize=3,
                alpha=0.85,
                label=f"{label} (n={len(runs)})" if j == 0 else None,
            )
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    fig.savefig(path, dpi=110)
    return Path(path)


def plot_bag_sizes(curves: dict[str, dict[int, list[float]]], path: Path) -> Path:
    """Mean test accuracy (+- std over seeds) against the number of digits per bag."""
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for i, (label, by_size) in enumerate(curves.items()):
        sizes = sorted(by_size)
        means = [statistics.mean(by_size[n]) for n in sizes]
        stds = [statistics.stdev(by_size[n]) if len(by_size[n]) > 1 else 0.0 for n in sizes]
        ax.errorbar(
            sizes,
            means,
            yerr=stds,
            **variant_style(i),
            marker="o",
            markersize=3,
            capsize=2,
            label=label,
        )
    ax.set_xlabel("digits per bag (test)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("test accuracy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    fig.savefig(path, dpi=110)
    return Path(path)
