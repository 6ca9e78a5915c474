import io

import pytest
import torch

from attnexp.viz.text import example_heatmap, token_heatmap, token_html, token_weights

MASK = torch.tensor([[True, True, True, False], [True, True, False, False]])


def test_pooling_weights_are_kept_and_padding_zeroed():
    attention = torch.full((2, 4), 0.25)
    (view,) = token_weights(attention, MASK).items()
    assert view[0] == "pooling"
    torch.testing.assert_close(view[1], attention * MASK)


def test_self_attention_becomes_the_weight_each_token_receives_from_real_queries():
    B, nh, T = 2, 2, 4
    attention = torch.softmax(torch.randn(B, nh, T, T), -1)
    attention[:, :, 3] = 100.0  # a padded query of row 0 must not count
    weights = token_weights(attention, MASK)
    assert list(weights) == ["head0", "head1"]
    expected = attention[0, 1, :3, :].mean(0) * MASK[0]  # row 0, head 1: mean over queries 0-2
    torch.testing.assert_close(weights["head1"][0], expected)
    assert torch.all(weights["head0"][1, 2:] == 0)  # padded tokens receive nothing


def test_no_attention_gives_no_views_and_a_wrong_shape_is_refused():
    assert token_weights(None, MASK) == {}
    with pytest.raises(ValueError, match=r"attention of shape \(2, 4, 4\): expected"):
        token_weights(torch.ones(2, 4, 4), MASK)


def test_html_escapes_tokens_and_shades_by_the_largest_weight():
    page = token_html(["<script>", "ok"], {"pooling": torch.tensor([0.2, 0.8])}, "a & b")
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<title>a &amp; b</title>" in page
    assert "rgba(220,30,30,0.250)" in page and "rgba(220,30,30,1.000)" in page
    assert "<b>pooling</b> (peak 1.6x uniform)" in page  # 0.8 of 2 tokens' weight


def test_heatmap_wraps_long_rows():
    weights = torch.full((1, 7), 1 / 7)
    figure = token_heatmap([[f"t{i}" for i in range(7)]], weights, ["row"], wrap=3)
    (ax,) = figure.axes
    assert len(ax.texts) == 7
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["row (peak 1.0x uniform)", "", ""]  # 3 + 3 + 1 tokens


def test_heatmap_labels_say_how_peaked_each_row_is():
    """Shaded by each row's own largest weight, uniform and peaked attention looked alike."""
    weights = torch.tensor([[0.25, 0.25, 0.25, 0.25, 0.0], [0.7, 0.1, 0.1, 0.05, 0.05]])
    figure = token_heatmap([list("abcd"), list("abcde")], weights, ["even", "peaked"])
    labels = [t.get_text() for t in figure.axes[0].get_yticklabels()]
    assert labels == ["even (peak 1.0x uniform)", "peaked (peak 3.5x uniform)"]


def test_heatmap_shades_by_each_examples_largest_weight_across_its_lines():
    """Shade = weight / the example's largest, also when the example wraps onto lines that do not
    hold it: each example's strongest token is the darkest, and every line keeps its scale."""
    weights = torch.tensor([[0.1, 0.6, 0.2, 0.1], [0.05, 0.05, 0.3, 0.6]])
    figure = token_heatmap([list("abcd"), list("efgh")], weights, ["one", "two"], wrap=2)
    shades = figure.axes[0].images[0].get_array()
    expected = [[1 / 6, 1.0], [2 / 6, 1 / 6], [1 / 12, 1 / 12], [0.5, 1.0]]
    torch.testing.assert_close(torch.tensor(shades.tolist()), torch.tensor(expected))


def test_an_examples_figure_wraps_after_16_tokens():
    tokens = [f"t{i}" for i in range(17)]
    figure = example_heatmap(tokens, {"pooling": torch.full((17,), 1 / 17)}, "long")
    assert len(figure.axes[0].get_yticklabels()) == 2  # 16 tokens, then 1
    short = example_heatmap(tokens[:16], {"pooling": torch.full((16,), 1 / 16)}, "short")
    assert len(short.axes[0].get_yticklabels()) == 1


def test_token_heatmap_draws_dollar_signs_literally():
    tokens = ["worth", "$$", "$5-$10", "$x$"]
    figure = token_heatmap([tokens], torch.rand(1, 4), ["$$ row"])
    figure.savefig(io.BytesIO(), format="png")  # "$$" is an empty formula to mathtext
    (ax,) = figure.axes
    assert [t.get_text() for t in ax.texts] == tokens
    assert not any(t.get_parse_math() for t in [*ax.texts, *ax.get_yticklabels()])
