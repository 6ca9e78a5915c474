import torch

from attnexp.viz.bags import plot_bag_attention


def test_one_panel_per_real_digit_framed_by_its_weight():
    mask = torch.tensor([[True, True, False], [True, False, False]])
    weights = torch.tensor([[0.9, 0.1, 0.0], [1.0, 0.0, 0.0]])
    figure = plot_bag_attention(
        torch.rand(2, 3, 28, 28), mask, weights, torch.tensor([7, 3]), torch.tensor([7, 1])
    )
    axes = figure.axes
    assert len(axes) == 6
    assert [ax.axison for ax in axes] == mask.flatten().tolist()  # padding drawn as nothing
    assert axes[0].get_title() == "0.90" and axes[1].get_title() == "0.10"
    assert axes[0].spines["left"].get_linewidth() > axes[1].spines["left"].get_linewidth()
    assert axes[3].get_ylabel() == "y=3 p=1"


def test_without_weights_no_frames_or_titles():
    figure = plot_bag_attention(
        torch.rand(1, 2, 28, 28),
        torch.ones(1, 2, dtype=torch.bool),
        None,
        torch.tensor([4]),
        torch.tensor([4]),
    )
    assert [ax.get_title() for ax in figure.axes] == ["", ""]
