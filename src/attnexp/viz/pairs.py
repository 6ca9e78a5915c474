"""Per-layer, per-head self-attention heatmaps for a tokenized sentence pair, with readable Chinese.

Matplotlib's default font has no CJK glyphs (it draws empty boxes). `cjk_font()` looks for one:
a system font known to cover simplified Chinese (e.g. Debian `fonts-noto-cjk`,
`fonts-wqy-microhei`), else the Noto Sans CJK SC file shipped by the PyPI package `mplfonts`
(`pip install 'attnexp[cjk]'`). With none, it logs a WARNING once and the labels show code points
(U+7535) instead of boxes.
"""

import functools
import importlib.util
import logging
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from matplotlib import font_manager
from matplotlib.figure import Figure

log = logging.getLogger(__name__)

SYSTEM_CJK_FONTS = (
    "Noto Sans CJK SC",
    "Noto Sans SC",
    "Source Han Sans SC",
    "Source Han Sans CN",
    "WenQuanYi Micro Hei",
    "WenQuanYi Zen Hei",
    "SimHei",
    "Microsoft YaHei",
    "PingFang SC",
    "Heiti SC",
    "AR PL UMing CN",
    "Noto Sans CJK JP",
    "Noto Serif CJK SC",
)
PACKAGED_FONTS = (("mplfonts", "fonts/NotoSansCJKsc-Regular.otf"),)


def _packaged_font(package: str, relative: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / relative
        if path.is_file():
            return path
    return None


@functools.cache
def cjk_font() -> font_manager.FontProperties | None:
    """A font with Chinese glyphs, or None (after one WARNING saying how to get one)."""
    installed = {f.name: f.fname for f in font_manager.fontManager.ttflist}
    for name in SYSTEM_CJK_FONTS:
        if name in installed:
            log.info("CJK font: %s (%s)", name, installed[name])
            return font_manager.FontProperties(fname=installed[name])
    for package, relative in PACKAGED_FONTS:
        path = _packaged_font(package, relative)
        if path is not None:
            log.info("CJK font: %s from the %s package", path.name, package)
            return font_manager.FontProperties(fname=str(path))
    log.warning(
        "no CJK font found: attention heatmaps label Chinese characters by code point (U+XXXX). "
        "Install one: pip install 'attnexp[cjk]' (in a source checkout: pip install -e '.[cjk]'; the "
        "mplfonts package), or apt-get install fonts-noto-cjk"
    )
    return None


def _is_cjk(char: str) -> bool:
    return (
        "\u3400" <= char <= "\u9fff"
        or "\uf900" <= char <= "\ufaff"
        or "\u3000" <= char <= "\u303f"
        or "\uff00" <= char <= "\uffef"
    )


def token_label(token: str, have_font: bool) -> str:
    if have_font or not any(_is_cjk(c) for c in token):
        return token
    return "".join(f"U+{ord(c):04X}" if _is_cjk(c) else c for c in token)


def plot_pair_attention(
    tokens: list[str], attention: list[torch.Tensor], title: str = ""
) -> Figure:
    """tokens (T,), attention: one (nh, T, T) map per layer -> a layers x heads grid of heatmaps.

    Rows of each map are queries, columns keys; a map's rows sum to 1 over the real tokens.
    """
    font = cjk_font()
    labels = [token_label(t, font is not None) for t in tokens]
    maps = [a.detach().float().cpu() for a in attention]
    depth, heads, T = len(maps), maps[0].shape[0], len(tokens)
    side = max(2.5, 0.2 * T + 1.0)
    fig, axes = plt.subplots(depth, heads, figsize=(side * heads, side * depth), squeeze=False)
    size = 7 if T <= 30 else 5
    for layer in range(depth):
        for head in range(heads):
            ax = axes[layer, head]
            ax.imshow(
                maps[layer][head, :T, :T], cmap="viridis", vmin=0.0
            )  # per-head scale: contrast
            ax.set_xticks(range(T))
            ax.set_yticks(range(T))
            # parse_math=False: a token such as "$$" is text, not a mathtext formula.
            text = {"fontproperties": font, "fontsize": size, "parse_math": False}
            ax.set_xticklabels(labels, rotation=90, **text)
            ax.set_yticklabels(labels, **text)
            ax.set_title(f"layer {layer + 1} head {head + 1}", fontsize=8)
    if title:
        fig.suptitle(title, fontproperties=font, fontsize=10)
    fig.tight_layout()
    return fig
