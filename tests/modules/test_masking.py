import pytest
import torch

from attnexp.modules.masking import lengths_to_mask, masked_mean, masked_softmax


def test_lengths_to_mask():
    mask = lengths_to_mask(torch.tensor([1, 3, 0]), max_len=4)
    assert mask.dtype == torch.bool and mask.shape == (3, 4)
    assert mask.tolist() == [[True, False, False, False], [True, True, True, False], [False] * 4]
    assert lengths_to_mask(torch.tensor([2, 5])).shape == (2, 5)


def test_masked_softmax_rows_sum_to_one_and_padding_gets_zero():
    scores = torch.randn(2, 5)
    mask = lengths_to_mask(torch.tensor([3, 5]), 5)
    weights = masked_softmax(scores, mask)
    assert torch.allclose(weights.sum(-1), torch.ones(2))
    assert (weights[0, 3:] == 0).all()
    # Only the real items' scores matter.
    changed = scores.clone()
    changed[0, 3:] = 1e4
    assert torch.equal(masked_softmax(changed, mask), weights)
    # However low the real scores are, the padding still gets nothing.
    low = masked_softmax(torch.tensor([[-2e4, -2e4, 0.0]]), torch.tensor([[True, True, False]]))
    assert torch.equal(low, torch.tensor([[0.5, 0.5, 0.0]]))


def test_masked_softmax_without_mask_is_softmax():
    scores = torch.randn(2, 5)
    assert torch.allclose(masked_softmax(scores, None), torch.softmax(scores, -1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_all_padding_row_gives_zeros_not_nan(dtype):
    scores = torch.randn(2, 4).to(dtype)
    mask = torch.tensor([[False] * 4, [True, True, False, False]])
    weights = masked_softmax(scores, mask)
    assert weights.dtype == dtype
    assert torch.isfinite(weights).all()
    assert (weights[0] == 0).all()
    assert torch.allclose(weights[1].float().sum(), torch.tensor(1.0), atol=1e-2)


def test_masked_softmax_bf16_with_large_scores():
    scores = torch.tensor([[3e38, -3e38, 1.0]]).to(torch.bfloat16)
    weights = masked_softmax(scores, torch.tensor([[True, True, False]]))
    assert torch.isfinite(weights).all() and weights[0, 2] == 0


def test_masked_softmax_gradients_flow_to_real_items_only():
    scores = torch.randn(2, 4, requires_grad=True)
    mask = torch.tensor([[True, True, False, False], [False] * 4])
    (masked_softmax(scores, mask) * torch.randn(2, 4)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert (scores.grad[0, 2:] == 0).all() and (scores.grad[1] == 0).all()
    assert scores.grad[0, :2].abs().sum() > 0


def test_masked_mean():
    values = torch.arange(2 * 3 * 2, dtype=torch.float32).view(2, 3, 2)
    mask = torch.tensor([[True, True, False], [False, False, False]])
    mean = masked_mean(values, mask)
    assert mean.shape == (2, 2)
    assert torch.allclose(mean[0], values[0, :2].mean(0))
    assert (mean[1] == 0).all()  # no real item: zeros, not NaN
    assert torch.allclose(masked_mean(values, None), values.mean(1))
