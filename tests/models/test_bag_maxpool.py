import pytest
import torch

from attnexp.errors import ConfigError
from attnexp.models.bag_maxpool import BagMaxPool
from attnexp.modules.masking import lengths_to_mask, masked_max
from attnexp.schema import rule_for

B, T, H, S, C = 3, 4, 8, 28, 10


def test_masked_max_skips_padding_and_pools_an_empty_bag_to_zeros():
    features = torch.randn(B, T, H)
    features[:, -1] = 100.0  # padded slots hold the largest values
    mask = lengths_to_mask(torch.tensor([3, 1, 0]), T)
    pooled, winners = masked_max(features, mask)
    assert torch.equal(pooled[0], features[0, :3].max(0).values)
    assert torch.equal(pooled[1], features[1, 0]) and (winners[1] == 0).all()
    assert (pooled[2] == 0).all()


@pytest.mark.parametrize("backbone", ["mlp", "conv"])
def test_shapes_shares_and_any_bag_size(backbone):
    torch.manual_seed(0)
    model = BagMaxPool(C, S, hidden_size=H, backbone=backbone).eval()
    mask = lengths_to_mask(torch.tensor([4, 2, 1]), T)
    items = torch.randn(B, T, 1, S, S) * mask[:, :, None, None, None]
    output = model(items, mask, return_attention=True)
    logits, shares = output.logits, output.attention
    assert logits.shape == (B, C) and shares.shape == (B, T)
    assert torch.allclose(shares.sum(-1), torch.ones(B)) and (shares[~mask] == 0).all()
    empty = torch.zeros(1, T, dtype=torch.bool)  # a bag of no items credits no padded slot
    assert (model(torch.zeros(1, T, 1, S, S), empty, return_attention=True).attention == 0).all()
    assert model(torch.randn(2, 9, 1, S, S), torch.ones(2, 9, dtype=torch.bool)).logits.shape == (
        2,
        C,
    )


def kinds(net: torch.nn.Module) -> list[str]:
    return [type(m).__name__ for m in net]


def test_backbone_and_pooled_norm_are_the_ones_asked_for():
    assert "Conv2d" in kinds(BagMaxPool(C, S, hidden_size=H, backbone="conv").backbone)
    assert "Conv2d" not in kinds(BagMaxPool(C, S, hidden_size=H, backbone="mlp").backbone)
    assert kinds(BagMaxPool(C, S, hidden_size=H, pooled_norm=True).head)[0] == "BatchNorm1d"
    assert kinds(BagMaxPool(C, S, hidden_size=H).head)[0] == "Linear"
    with pytest.raises(ValueError, match=r"backbone='resnet' is not one of mlp, conv"):
        BagMaxPool(C, S, backbone="resnet")


def test_a_hidden_size_below_one_names_the_setting():
    """The schema refuses it before torch (attnexp.schema)."""
    with pytest.raises(ConfigError, match=r"model.hidden_size=0 must be a whole number >= 1"):
        rule_for("model.hidden_size").check("model.hidden_size", 0)
