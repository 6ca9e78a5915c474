import pytest
import torch
from scorer_configs import pooling_params

from attnexp.modules import AdditiveScorer, AttentionPooling, DotScorer
from attnexp.modules.masking import lengths_to_mask

B, T, H = 2, 5, 8
CASES = pooling_params()  # every conf/scorer option with each query it takes, + simple


def make(scorer, query):
    torch.manual_seed(0)
    return AttentionPooling(H, scorer, query=query)


@pytest.mark.parametrize("scorer,query", CASES)
def test_shapes_weights_and_padding(scorer, query):
    pool = make(scorer, query)
    items = torch.randn(B, T, H)
    mask = lengths_to_mask(torch.tensor([3, 5]), T)
    pooled, weights = pool(items, mask)
    assert pooled.shape == (B, H) and weights.shape == (B, T)
    assert torch.allclose(weights.sum(-1), torch.ones(B))
    assert (weights[0, 3:] == 0).all()
    assert torch.allclose(pooled, torch.einsum("bt,bth->bh", weights, items))
    # Padded content changes nothing (the mean query ignores it too).
    noisy = items.clone()
    noisy[0, 3:] = 100 * torch.randn(2, H)
    pooled2, weights2 = pool(noisy, mask)
    assert torch.allclose(pooled2, pooled, atol=1e-6) and torch.allclose(
        weights2, weights, atol=1e-6
    )


@pytest.mark.parametrize("scorer,query", CASES)
def test_all_padding_bag_pools_to_zeros(scorer, query):
    pool = make(scorer, query)
    mask = torch.tensor([[False] * T, [True] * T])
    pooled, weights = pool(torch.randn(B, T, H), mask)
    assert torch.isfinite(pooled).all() and (pooled[0] == 0).all() and (weights[0] == 0).all()


@pytest.mark.parametrize("scorer,query", CASES)
def test_gradients_flow_and_bf16(scorer, query):
    pool = make(scorer, query)
    items = torch.randn(B, T, H, requires_grad=True)
    pooled, _ = pool(items, lengths_to_mask(torch.tensor([2, 5]), T))
    pooled.square().sum().backward()
    assert items.grad[0, :2].abs().sum() > 0 and (items.grad[0, 2:] == 0).all()
    assert all(p.grad is not None for p in pool.parameters())
    pooled16, weights16 = pool.to(torch.bfloat16)(items.detach().bfloat16(), None)
    assert pooled16.dtype == torch.bfloat16 and torch.isfinite(weights16).all()


def test_accepts_a_built_scorer_and_learned_query_is_a_parameter():
    scorer = AdditiveScorer(H, H)
    pool = AttentionPooling(H, scorer, query="learned")
    assert pool.scorer is scorer
    assert any(p is pool.query for p in pool.parameters())


def test_errors():
    with pytest.raises(ValueError, match="query='context' is not one of learned, mean, none"):
        AttentionPooling(H, AdditiveScorer, query="context")
    with pytest.raises(ValueError, match="needs a query"):
        AttentionPooling(H, DotScorer, query="none")
