import math

import pytest
import torch
from scorer_configs import scorer_factories, scorer_params

from attnexp.modules.scorers import (
    AdditiveScorer,
    BilinearScorer,
    DotScorer,
    ScaledDotScorer,
    Scorer,
    SimpleScorer,
)

B, T, H = 2, 5, 8


def subclasses(cls: type) -> set[type]:
    return {sub for direct in cls.__subclasses__() for sub in (direct, *subclasses(direct))}


def test_every_scorer_class_has_an_option():
    """A Scorer subclass without a conf/scorer yaml would escape the tests below (and the CLI)."""
    covered = {factory.func for factory in scorer_factories().values()}
    defined = {c for c in subclasses(Scorer) if c.__module__.startswith("attnexp.")}
    assert SimpleScorer in defined and defined - covered == set()


@pytest.mark.parametrize("factory", scorer_params())
def test_shapes_and_gradients(factory):
    torch.manual_seed(0)
    scorer = factory(key_dim=H, query_dim=H)
    keys = torch.randn(B, T, H, requires_grad=True)
    query = torch.randn(B, H, requires_grad=True) if scorer.needs_query else None
    scores = scorer(keys, query)
    assert scores.shape == (B, T)
    scores.sum().backward()
    assert keys.grad is not None and keys.grad.abs().sum() > 0
    if query is not None:
        assert query.grad is not None and query.grad.abs().sum() > 0
    for name, param in scorer.named_parameters():
        assert param.grad is not None, name


@pytest.mark.parametrize("factory", scorer_params())
def test_bf16(factory):
    scorer = factory(key_dim=H, query_dim=H).to(torch.bfloat16)
    keys = torch.randn(B, T, H, dtype=torch.bfloat16)
    query = torch.randn(B, H, dtype=torch.bfloat16) if scorer.needs_query else None
    scores = scorer(keys, query)
    assert scores.dtype == torch.bfloat16 and torch.isfinite(scores).all()


def test_dot_and_scaled_dot_values():
    keys, query = torch.randn(B, T, H), torch.randn(B, H)
    expected = (keys * query[:, None, :]).sum(-1)
    assert torch.allclose(DotScorer(H, H)(keys, query), expected, atol=1e-6)
    assert torch.allclose(ScaledDotScorer(H, H)(keys, query), expected / math.sqrt(H), atol=1e-6)


def test_additive_value_and_different_sizes():
    scorer = AdditiveScorer(key_dim=H, query_dim=3, attn_dim=4)
    assert scorer.key_proj.out_features == scorer.query_proj.out_features == 4  # scorer.attn_dim
    keys, query = torch.randn(B, T, H), torch.randn(B, 3)
    hidden = torch.tanh(
        keys @ scorer.key_proj.weight.T
        + (query @ scorer.query_proj.weight.T + scorer.query_proj.bias)[:, None]
    )
    assert torch.allclose(scorer(keys, query), (hidden @ scorer.v.weight.T).squeeze(-1), atol=1e-6)


def test_scaled_dot_learns_its_scale_from_one_over_sqrt_d():
    keys, query = torch.randn(B, T, H), torch.randn(B, H)
    fixed, learned = ScaledDotScorer(H, H), ScaledDotScorer(H, H, learn_scale=True)
    assert [n for n, _ in fixed.named_parameters()] == []
    assert [n for n, _ in learned.named_parameters()] == ["log_scale"]
    scores = learned(keys, query)
    assert torch.allclose(scores, fixed(keys, query), atol=1e-6)  # the same scorer at the start
    scores.sum().backward()
    assert learned.log_scale.grad is not None and learned.log_scale.grad != 0


def test_bilinear_value_and_identity_init():
    scorer = BilinearScorer(key_dim=H, query_dim=4)
    keys, query = torch.randn(B, T, H), torch.randn(B, 4)
    expected = ((keys @ scorer.weight) * query[:, None, :]).sum(-1)  # k^T W q per item
    assert torch.allclose(scorer(keys, query), expected, atol=1e-5)
    torch.manual_seed(0)
    ident = BilinearScorer(H, H, identity_init=True)
    assert torch.allclose(ident.weight, torch.eye(H) / math.sqrt(H), atol=0.05)
    assert not torch.equal(ident.weight, torch.eye(H) / math.sqrt(H))  # plus small noise


@pytest.mark.parametrize("cls", [DotScorer, ScaledDotScorer])
def test_dot_scorers_need_equal_sizes(cls):
    with pytest.raises(ValueError, match=r"key_dim=8 and query_dim=4.*AdditiveScorer"):
        cls(key_dim=8, query_dim=4)


def test_bilinear_identity_init_needs_equal_sizes():
    with pytest.raises(ValueError, match="same size"):
        BilinearScorer(8, 4, identity_init=True)


def test_simple_scorer_needs_no_query():
    assert not SimpleScorer.needs_query and Scorer.needs_query
    assert SimpleScorer(H)(torch.randn(B, T, H)).shape == (B, T)


def test_simple_scorer_value():
    """w^T tanh(W k + b) + c, from the scorer's own weights; the tanh makes it more than linear."""
    torch.manual_seed(0)
    scorer = SimpleScorer(H, attn_dim=4)
    first, second = scorer.net[0], scorer.net[-1]
    assert first.out_features == second.in_features == 4  # scorer.attn_dim sets the hidden size
    keys = 3 * torch.randn(B, T, H)  # large enough that tanh is far from the identity
    hidden = torch.tanh(keys @ first.weight.T + first.bias)  # (B, T, 4)
    expected = (hidden @ second.weight.T + second.bias).squeeze(-1)
    assert torch.allclose(scorer(keys), expected, atol=1e-6)
