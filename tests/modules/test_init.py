import math

import pytest
import torch
from torch import nn

from attnexp.modules import MultiHeadAttention
from attnexp.modules.init import init_linear_layers


def test_xavier_bounds_and_zero_biases():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2))
    init_linear_layers(net, "xavier")
    for layer in (net[0], net[2]):
        fan_out, fan_in = layer.weight.shape
        bound = math.sqrt(6 / (fan_in + fan_out))
        assert layer.weight.abs().max() <= bound
        # Uniform over the whole range, not torch's narrower 1/sqrt(fan_in) one.
        assert layer.weight.abs().max() > 0.9 * bound
        assert (layer.bias == 0).all()


def test_fused_projections_are_initialised_part_by_part():
    torch.manual_seed(0)
    attention = MultiHeadAttention(64, 4)
    init_linear_layers(attention, "xavier")
    part_bound = math.sqrt(6 / (64 + 64))  # each of q, k, v as a 64 -> 64 layer
    for part in attention.in_proj.weight.chunk(3):
        assert part.abs().max() <= part_bound
        assert part.abs().max() > math.sqrt(6 / (64 + 3 * 64))  # wider than one fused matrix


def test_torch_scheme_leaves_layers_as_they_are():
    layer = nn.Linear(8, 4)
    before = [p.clone() for p in layer.parameters()]
    init_linear_layers(layer, "torch")
    assert all(torch.equal(a, b) for a, b in zip(before, layer.parameters(), strict=True))


def test_unknown_scheme_names_the_argument():
    with pytest.raises(ValueError, match=r"linear_init='paddle'.*torch, xavier"):
        init_linear_layers(nn.Linear(2, 2), "paddle")
