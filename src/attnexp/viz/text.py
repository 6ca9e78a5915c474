"""Per-token attention of text models: a heatmap figure and a self-contained HTML page."""

import html
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure


def token_weights(attention: torch.Tensor | None, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Attention as one weight per token, per view: {"pooling": (B, T)} or {"head0": (B, T), ...}.

    Pooling weights (B, T) are used as they are. Self-attention weights (B, nh, T, T) become the
    attention each token receives, averaged over the real query positions, per head.
    """
    if attention is None:
        return {}
    attention, mask = attention.detach().float().cpu(), mask.cpu()
    if attention.ndim == 2:
        return {"pooling": attention * mask}
    if attention.ndim == 4:
        queries = mask[:, None, None, :].float()  # (B, 1, 1, T)
        # summed over the real queries as a product: no (B, nh, T, T) temporary
        received = (queries @ attention).squeeze(2) / queries.sum(-1).clamp(min=1.0)  # (B, nh, T)
        received = received * mask[:, None, :]
        return {f"head{h}": received[:, h] for h in range(received.shape[1])}
    raise ValueError(
        f"attention of shape {tuple(attention.shape)}: expected (B, T) or (B, nh, T, T)"
    )


def _lines(rows: list[list[str]], weights: torch.Tensor, labels: list[str], wrap: int | None):
    for r, tokens in enumerate(rows):
        width = wrap or max(1, len(tokens))
        for start in range(0, max(1, len(tokens)), width):
            chunk = tokens[start : start + width]
            yield (
                r,
                labels[r] if start == 0 else "",
                chunk,
                weights[r, start : start + len(chunk)].tolist(),
            )


def token_heatmap(
    rows: list[list[str]],
    weights: torch.Tensor,
    labels: list[str],
    title: str = "",
    wrap: int | None = None,
) -> Figure:
    """One line of shaded token cells per row (wrapped every `wrap` tokens); shade = weight / row max.

    The shade shows where a row's attention goes, not how peaked it is (near-uniform attention
    shades every token alike), so each row's label says its largest weight as a multiple of the
    uniform one, 1/n for n tokens: "(peak 1.0x uniform)" is attention spread evenly.

    Args:
        rows: R token lists. weights: (R, T) with T >= each row's length. labels: R row labels.
    """
    labels = [
        f"{label} (peak {float(weights[r, : len(tokens)].max()) * len(tokens):.1f}x uniform)"
        if tokens
        else label
        for r, (label, tokens) in enumerate(zip(labels, rows, strict=True))
    ]
    lines = list(_lines(rows, weights, labels, wrap))
    num_cols = max(1, max(len(chunk) for _, _, chunk, _ in lines))
    grid = np.full((len(lines), num_cols), np.nan)
    for i, (_, _, chunk, w) in enumerate(lines):
        grid[i, : len(chunk)] = w
    # Normalise per example (not per wrapped line), so the strongest token of each example is darkest.
    for r in range(len(rows)):
        ids = [i for i, line in enumerate(lines) if line[0] == r]
        peak = np.nanmax(grid[ids]) if np.isfinite(grid[ids]).any() else 0.0
        if peak > 0:
            grid[ids] = grid[ids] / peak
    fig, ax = plt.subplots(figsize=(0.85 * num_cols + 2.2, 0.32 * len(lines) + 0.7))
    ax.imshow(grid, cmap="Reds", vmin=0.0, vmax=1.4, aspect="auto")
    # parse_math=False: a token such as "$$" or "$5-$10" is text, not a mathtext formula.
    for i, (_, _, chunk, _) in enumerate(lines):
        for j, token in enumerate(chunk):
            ax.text(j, i, token[:14], ha="center", va="center", fontsize=7, parse_math=False)
    ax.set_yticks(range(len(lines)), [line[1] for line in lines], fontsize=7, parse_math=False)
    ax.set_xticks([])
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def token_html(tokens: list[str], weights: dict[str, torch.Tensor], title: str) -> str:
    """A standalone HTML page: the tokens shaded by weight / the view's largest (one paragraph per
    view, its peak as a multiple of the uniform weight 1/n), hover = the weight."""
    return page(title, [f"<h3>{html.escape(title)}</h3>", *views_html(tokens, weights)])


def page(title: str, body: list[str]) -> str:
    head = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto;line-height:1.9}"
        "span{padding:1px 2px;border-radius:3px}</style></head><body>",
    ]
    return "\n".join([*head, *body, "</body></html>"])


def views_html(tokens: list[str], weights: dict[str, Sequence[float] | torch.Tensor]):
    """One paragraph per view: its name, its peak as a multiple of uniform, the shaded tokens."""
    parts = []
    for tag, w in weights.items():
        w = torch.as_tensor(w).reshape(-1)[: len(tokens)].float()
        peak = float(w.max()) if len(w) and float(w.max()) > 0 else 1.0
        spans = [
            f"<span style='background:rgba(220,30,30,{float(v) / peak:.3f})' title='{float(v):.4f}'>"
            f"{html.escape(tok)}</span>"
            for tok, v in zip(tokens, w, strict=False)
        ]
        shown = min(len(tokens), len(w))
        spread = f" (peak {peak * shown:.1f}x uniform)" if shown and float(w.max()) > 0 else ""
        parts.append(f"<p><b>{html.escape(tag)}</b>{spread}<br>{' '.join(spans)}</p>")
    return parts


def save_comparison(
    results: list[dict], captions: dict[str, str], path: Path, max_examples: int
) -> Path:
    """predict over a folder of runs: per example (the first `max_examples`), each run's label
    and probability (or translation and score), then its tokens shaded per view, so the runs' attention reads side by side.
    `results`: predict's rows, each with its `run`, in the order the runs were read; `captions`:
    what to say of each run beside its name (its test accuracy, say)."""
    by_run: dict[str, list[dict]] = {}
    for result in results:
        by_run.setdefault(result["run"], []).append(result)
    title = f"attention compared over {len(by_run)} runs"
    body = [f"<h2>{html.escape(title)}</h2>"]
    for e, first in enumerate(next(iter(by_run.values()))[:max_examples]):
        shown = " | ".join(first["input"].values())
        body.append(f"<hr><h3>example {e}: {html.escape(shown)}</h3>")
        for run, rows in by_run.items():
            row, name = rows[e], f"<b>{html.escape(run)}</b>"
            if captions.get(run):
                name += f" ({html.escape(captions[run])})"
            if row["problem"] is not None:
                body.append(f"<p>{name}: no prediction ({html.escape(row['problem'])})</p>")
                continue
            answer = (
                f"{row['translation']} (score {row['score']:.4f})"
                if "translation" in row
                else f"{row['label']} {row['probability']:.4f}"
            )
            attention = "" if "attention" in row else " (no attention)"
            body.append(f"<p>{name}: {html.escape(answer)}{attention}</p>")
            body += views_html(row.get("tokens", []), row.get("attention", {}))
    Path(path).write_text(page(title, body), encoding="utf-8")
    return Path(path)


def save_token_html(
    tokens: list[str], weights: dict[str, torch.Tensor], title: str, path: Path
) -> Path:
    Path(path).write_text(token_html(tokens, weights, title), encoding="utf-8")
    return Path(path)


def example_heatmap(tokens: list[str], weights: dict[str, torch.Tensor], title: str) -> Figure:
    """One example's heatmap: a row of its tokens per view, wrapped every 16 tokens when longer."""
    stacked = torch.stack(list(weights.values())) if weights else torch.zeros(0, len(tokens))
    wrap = 16 if len(tokens) > 16 else None
    return token_heatmap([tokens] * len(weights), stacked, list(weights), title=title, wrap=wrap)


def save_prediction(
    figure: Figure,
    tokens: list[str],
    weights: dict[str, torch.Tensor],
    title: str,
    stem: Path,
    dpi: int = 110,
) -> list[Path]:
    """One prediction's files: `figure` as `<stem>.png` (then closed) and the tokens shaded by
    `weights` as `<stem>.html`."""
    figure.savefig(stem.with_suffix(".png"), dpi=dpi)
    plt.close(figure)
    return [
        stem.with_suffix(".png"),
        save_token_html(tokens, weights, title, stem.with_suffix(".html")),
    ]
