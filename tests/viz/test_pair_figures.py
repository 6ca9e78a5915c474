import io

import torch

from attnexp.viz import pairs
from attnexp.viz.pairs import plot_pair_attention


def test_plot_pair_attention_draws_dollar_signs_literally():
    tokens = ["[CLS]", "$$", "$5-$10", "[SEP]"]
    figure = plot_pair_attention(tokens, [torch.softmax(torch.randn(1, 4, 4), -1)])
    figure.savefig(io.BytesIO(), format="png")  # "$$" is an empty formula to mathtext
    (ax,) = figure.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == tokens
    assert not any(t.get_parse_math() for t in ax.get_xticklabels() + ax.get_yticklabels())


def test_without_a_cjk_font_labels_are_code_points_and_a_warning_says_how_to_get_one(
    monkeypatch, caplog
):
    monkeypatch.setattr(pairs.font_manager.fontManager, "ttflist", [])
    monkeypatch.setattr(pairs, "PACKAGED_FONTS", ())
    pairs.cjk_font.cache_clear()
    try:
        with caplog.at_level("WARNING", logger=pairs.__name__):
            assert pairs.cjk_font() is None
    finally:
        pairs.cjk_font.cache_clear()  # the next caller looks again, with the real fonts
    assert "pip install 'attnexp[cjk]'" in caplog.text
    assert "pip install -e '.[cjk]'" in caplog.text  # the README's form, for a source checkout
    assert pairs.token_label("电脑[SEP]", have_font=False) == "U+7535U+8111[SEP]"
    assert pairs.token_label("电脑", have_font=True) == "电脑"


def test_each_panel_draws_its_own_layer_and_head():
    """A grid of layers x heads: panel (l, h) shows layer l's head h, titled so (1-based)."""
    attention = [torch.softmax(torch.randn(3, 4, 4), -1) for _ in range(2)]  # 2 layers, 3 heads
    figure = plot_pair_attention(["a", "b", "c", "d"], attention)
    assert len(figure.axes) == 6
    for i, ax in enumerate(figure.axes):
        layer, head = divmod(i, 3)
        assert ax.get_title() == f"layer {layer + 1} head {head + 1}"
        torch.testing.assert_close(
            torch.as_tensor(ax.images[0].get_array()), attention[layer][head]
        )
