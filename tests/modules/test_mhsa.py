import pytest
import torch
from torch import nn

from attnexp.modules import MultiHeadAttention, SimpleSelfAttention
from attnexp.modules.masking import lengths_to_mask

B, T, E, NH = 2, 5, 8, 2


def pair(bias: bool = True):
    torch.manual_seed(0)
    ours = MultiHeadAttention(E, NH, bias=bias).eval()
    ref = nn.MultiheadAttention(E, NH, bias=bias, batch_first=True).eval()
    with torch.no_grad():  # same layout: in_proj (3E, E) = [W_q; W_k; W_v], then out_proj
        ref.in_proj_weight.copy_(ours.in_proj.weight)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        if bias:
            ref.in_proj_bias.copy_(ours.in_proj.bias)
            ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ours, ref


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_equals_nn_multihead_attention(need_weights, masked, bias):
    ours, ref = pair(bias)
    x = torch.randn(B, T, E)
    mask = lengths_to_mask(torch.tensor([3, 5]), T) if masked else None
    out, weights = ours(x, mask, need_weights=need_weights)
    ref_out, ref_weights = ref(
        x,
        x,
        x,
        key_padding_mask=None if mask is None else ~mask,
        need_weights=True,
        average_attn_weights=False,
    )
    assert out.shape == (B, T, E)
    assert torch.allclose(out, ref_out, atol=1e-5)
    if need_weights:
        assert weights.shape == (B, NH, T, T)
        assert torch.allclose(weights, ref_weights, atol=1e-5)
    else:
        assert weights is None


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("layer", [lambda: pair()[0], SimpleSelfAttention], ids=["mhsa", "simple"])
def test_the_fused_kernel_runs_exactly_when_no_weights_are_asked_for(
    layer, need_weights, monkeypatch
):
    calls = []
    fused = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(
        torch.nn.functional,
        "scaled_dot_product_attention",
        lambda *args, **kwargs: calls.append(1) or fused(*args, **kwargs),
    )
    mask = lengths_to_mask(torch.tensor([3, 5]), T)
    layer()(torch.randn(B, T, E), mask, need_weights=need_weights)
    assert len(calls) == (0 if need_weights else 1)


def test_weights_rows_sum_to_one_and_padded_keys_get_zero():
    ours, _ = pair()
    mask = lengths_to_mask(torch.tensor([3, 5]), T)
    x = torch.randn(B, T, E)
    out, weights = ours(x, mask, need_weights=True)
    assert torch.allclose(weights.sum(-1), torch.ones(B, NH, T))
    assert (weights[0, :, :, 3:] == 0).all()
    noisy = x.clone()
    noisy[0, 3:] = 50.0
    out2, _ = ours(noisy, mask)
    assert torch.allclose(out2[0, :3], out[0, :3], atol=1e-5)  # real positions unchanged


def test_all_padding_sequence_stays_finite():
    ours, _ = pair()
    mask = torch.tensor([[False] * T, [True] * T])
    for need_weights in (False, True):
        out, _ = ours(torch.randn(B, T, E), mask, need_weights=need_weights)
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("need_weights", [False, True])
def test_all_padding_sequence_attends_over_all_its_positions(need_weights):
    """A sequence with no real token is unmasked, not left to the kernel: the fused kernels
    differ there (NaN on some backends, zeros on torch 2.13's CPU one), so finiteness alone cannot
    show the guard; its defined result can: attention as if there were no mask."""
    ours, _ = pair()
    x = torch.randn(B, T, E)
    out, weights = ours(x, torch.tensor([[False] * T, [True] * 3 + [False] * 2]), need_weights)
    unmasked, _ = ours(x[:1], None, need_weights)
    torch.testing.assert_close(out[:1], unmasked)
    if need_weights:
        torch.testing.assert_close(weights[0].sum(-1), torch.ones(NH, T))


def test_gradients_flow_and_bf16():
    ours, _ = pair()
    ours.train()
    x = torch.randn(B, T, E, requires_grad=True)
    out, _ = ours(x, lengths_to_mask(torch.tensor([3, 5]), T))
    out.sum().backward()
    assert x.grad.abs().sum() > 0 and all(p.grad is not None for p in ours.parameters())
    ours16 = ours.eval().to(torch.bfloat16)
    for need_weights in (False, True):
        out16, _ = ours16(
            x.detach().bfloat16(), torch.tensor([[True] * 3 + [False] * 2] * B), need_weights
        )
        assert out16.dtype == torch.bfloat16 and torch.isfinite(out16).all()


@pytest.mark.parametrize("need_weights", [False, True])
def test_dropout_only_in_training(need_weights):
    """Both paths drop attention in training: the fused one (no weights) is the one training uses."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(E, NH, dropout=0.5).eval()
    x = torch.randn(B, T, E)
    mask = lengths_to_mask(torch.tensor([3, 5]), T)
    evaluated = layer(x, mask, need_weights=need_weights)[0]
    assert torch.equal(evaluated, layer(x, mask, need_weights=need_weights)[0])
    layer.train()
    a, b = (layer(x, mask, need_weights=need_weights)[0] for _ in range(2))
    assert not torch.allclose(a, b) and not torch.allclose(a, evaluated)


@pytest.mark.parametrize("heads", [3, 0])
def test_heads_must_divide_the_features(heads):
    with pytest.raises(
        ValueError, match=rf"num_heads={heads} must be a positive divisor of embed_dim=8"
    ):
        MultiHeadAttention(8, heads)


def test_fused_projections_serve_self_attention_only():
    with pytest.raises(ValueError, match="memory must be None"):
        MultiHeadAttention(8, 2)(torch.randn(1, 3, 8), memory=torch.randn(1, 4, 8))


def test_simple_self_attention_ignores_padding():
    x = torch.randn(B, T, E)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, 3:] = False
    out, weights = SimpleSelfAttention()(x, mask, need_weights=True)
    assert weights.shape == (B, 1, T, T)
    assert torch.all(weights[0, :, :, 3:] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, 1, T))
    changed = x.clone()
    changed[0, 3:] = 100.0
    out_changed, _ = SimpleSelfAttention()(changed, mask)
    torch.testing.assert_close(out_changed[0, :3], out[0, :3])
    assert SimpleSelfAttention()(x, mask)[1] is None


def simple_reference(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(X X^T) X over the real keys, written out."""
    scores = (x @ x.transpose(1, 2)).masked_fill(~mask[:, None, :], float("-inf"))
    weights = scores.softmax(-1)
    return weights @ x, weights


@pytest.mark.parametrize("need_weights", [False, True])
def test_simple_self_attention_equals_its_formula_with_gradients(need_weights):
    """softmax(X X^T) X unscaled, through the fused kernel (training's path) and the weights path,
    gradients included."""
    torch.manual_seed(0)
    x = torch.randn(3, T, E, requires_grad=True)
    mask = lengths_to_mask(torch.tensor([3, 5, 1]), T)
    out, weights = SimpleSelfAttention()(x, mask, need_weights=need_weights)
    ref_x = x.detach().clone().requires_grad_(True)
    ref_out, ref_weights = simple_reference(ref_x, mask)
    torch.testing.assert_close(out, ref_out)
    if need_weights:
        torch.testing.assert_close(weights, ref_weights[:, None])
    out.sum().backward()
    ref_out.sum().backward()
    torch.testing.assert_close(x.grad, ref_x.grad)


@pytest.mark.parametrize("need_weights", [False, True])
def test_simple_self_attention_all_padding_attends_over_all_positions(need_weights):
    """As MultiHeadAttention: defined, whichever path, not left to the kernel."""
    x = torch.randn(B, T, E)
    mask = torch.tensor([[False] * T, [True] * 3 + [False] * 2])
    out, weights = SimpleSelfAttention()(x, mask, need_weights)
    torch.testing.assert_close(
        out[:1], simple_reference(x[:1], torch.ones(1, T, dtype=torch.bool))[0]
    )
    if need_weights:
        torch.testing.assert_close(weights[0].sum(-1), torch.ones(1, T))


@pytest.mark.parametrize("need_weights", [False, True])
def test_separate_projections_compute_the_fused_self_attention(need_weights):
    """`fused_qkv=False` (the decoder's layout) is the same attention: with in_proj = [q; kv]
    the two layouts agree on self-attention."""
    torch.manual_seed(0)
    fused, separate = MultiHeadAttention(E, NH).eval(), MultiHeadAttention(E, NH, fused_qkv=False)
    with torch.no_grad():
        q, kv = fused.in_proj.weight.split([E, 2 * E])
        separate.q_proj.weight.copy_(q), separate.kv_proj.weight.copy_(kv)
        q, kv = fused.in_proj.bias.split([E, 2 * E])
        separate.q_proj.bias.copy_(q), separate.kv_proj.bias.copy_(kv)
        separate.out_proj.load_state_dict(fused.out_proj.state_dict())
    x, mask = torch.randn(B, T, E), torch.ones(B, T, dtype=torch.bool)
    mask[0, 3:] = False
    a, wa = fused(x, mask, need_weights)
    b, wb = separate.eval()(x, mask, need_weights, memory=x)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert (wa is None) == (wb is None) == (not need_weights)
