"""The figures of `python -m attnexp.explain`: histograms of a measure per method, erasure
curves, and a page of examples with attention beside integrated gradients."""

import html
from pathlib import Path

import torch
from matplotlib.figure import Figure

from attnexp.viz.report import variant_style
from attnexp.viz.text import page, views_html


def plot_histograms(
    values: dict[str, list[float]], path: Path, xlabel: str, value_range: tuple[float, float]
) -> Path:
    """One histogram per name (NaN and None left out), overlaid, over `value_range`."""
    fig = Figure(figsize=(6, 3.5))
    ax = fig.subplots()
    for i, (name, vals) in enumerate(values.items()):
        kept = [v for v in vals if v is not None and v == v]  # NaN, null: not applicable
        if kept:
            ax.hist(
                kept, bins=20, range=value_range, alpha=0.45, label=f"{name} (n={len(kept)})",
                color=variant_style(i)["color"],
            )  # fmt: skip
    ax.set_xlabel(xlabel)
    ax.set_ylabel("examples")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return Path(path)


def plot_erasure_curves(curves: dict[str, list[float]], path: Path) -> Path:
    """The share of decisions flipped against the fraction of erasable positions removed, one
    line per erasure order (a faithful order rises first)."""
    fig = Figure(figsize=(6, 3.5))
    ax = fig.subplots()
    for i, (name, curve) in enumerate(curves.items()):
        steps = len(curve)
        ax.plot([(s + 1) / steps for s in range(steps)], curve, label=name, **variant_style(i))
    ax.set_xlabel("fraction of the erasable positions removed (most important first)")
    ax.set_ylabel("decisions flipped")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return Path(path)


def save_examples_page(
    examples: list[tuple[str, list[str], dict[str, torch.Tensor]]], title: str, path: Path
) -> Path:
    """examples: (caption, tokens, {view: (T,) weights}) each; every view's tokens shaded by
    weight / its largest (negative attributions unshaded)."""
    body = [f"<h2>{html.escape(title)}</h2>"]
    for caption, tokens, views in examples:
        shown = {name: w.clamp(min=0) for name, w in views.items()}
        body.append(f"<hr><h3>{html.escape(caption)}</h3>")
        body += views_html(tokens, shown)
    Path(path).write_text(page(title, body), encoding="utf-8")
    return Path(path)
