import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnexp.modules.transformer import TorchEncoderBlock, TransformerEncoderBlock

E, NH, FF = 8, 2, 16
MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)


def copy_from_torch(ours: TransformerEncoderBlock, ref: nn.TransformerEncoderLayer) -> None:
    with torch.no_grad():
        ours.self_attn.in_proj.weight.copy_(ref.self_attn.in_proj_weight)
        ours.self_attn.in_proj.bias.copy_(ref.self_attn.in_proj_bias)
        ours.self_attn.out_proj.load_state_dict(ref.self_attn.out_proj.state_dict())
        ours.feed_forward.linear1.load_state_dict(ref.linear1.state_dict())
        ours.feed_forward.linear2.load_state_dict(ref.linear2.state_dict())
        ours.norm1.load_state_dict(ref.norm1.state_dict())
        ours.norm2.load_state_dict(ref.norm2.state_dict())


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_custom_block_equals_torch_encoder_layer(norm, activation):
    torch.manual_seed(0)
    ours = TransformerEncoderBlock(
        E, NH, FF, dropout=0.1, attention_dropout=0.1, activation=activation, norm=norm
    ).eval()
    ref = nn.TransformerEncoderLayer(
        E, NH, FF, 0.1, activation=activation, batch_first=True, norm_first=norm == "pre"
    ).eval()
    copy_from_torch(ours, ref)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in ref.parameters())
    x = torch.randn(2, 5, E)
    with torch.no_grad():
        out, _ = ours(x, MASK)
        expected = ref(x, src_key_padding_mask=~MASK)
    assert torch.allclose(out[MASK], expected[MASK], atol=1e-5)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_torch_block_weights_equal_ours(norm):
    """The wrapper recomputes the weights from the block input, normalised first under pre-norm."""
    torch.manual_seed(0)
    wrapped = TorchEncoderBlock(E, NH, FF, dropout=0.0, attention_dropout=0.0, norm=norm).eval()
    ours = TransformerEncoderBlock(E, NH, FF, dropout=0.0, attention_dropout=0.0, norm=norm).eval()
    copy_from_torch(ours, wrapped.layer)
    x = torch.randn(2, 5, E)
    with torch.no_grad():
        out_a, w_a = ours(x, MASK, need_weights=True)
        out_b, w_b = wrapped(x, MASK, need_weights=True)
    assert w_a.shape == w_b.shape == (2, NH, 5, 5)
    assert torch.allclose(w_a, w_b, atol=1e-5) and torch.allclose(
        out_a[MASK], out_b[MASK], atol=1e-5
    )


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_padding_is_ignored_and_weights_are_masked(norm):
    torch.manual_seed(0)
    block = TransformerEncoderBlock(E, NH, FF, norm=norm).eval()
    x = torch.randn(2, 5, E)
    changed = x.clone()
    changed[1, 3:] = 100.0  # padded positions of example 1
    with torch.no_grad():
        out, weights = block(x, MASK, need_weights=True)
        out2, _ = block(changed, MASK)
    assert torch.allclose(out[MASK], out2[MASK], atol=1e-5)
    assert torch.all(weights[1, :, :, 3:] == 0)
    assert torch.allclose(weights.sum(-1), torch.ones(2, NH, 5))


def fused_kernel_called(*args, **kwargs):
    raise AssertionError("fused_attention=False ran F.scaled_dot_product_attention")


def test_fused_and_explicit_attention_agree(monkeypatch):
    """fused_attention=False (the benchmarks' explicit path) runs without the fused kernel."""
    torch.manual_seed(0)
    fused = TransformerEncoderBlock(E, NH, FF).eval()
    explicit = TransformerEncoderBlock(E, NH, FF, fused_attention=False).eval()
    explicit.load_state_dict(fused.state_dict())
    x = torch.randn(2, 5, E)
    with torch.no_grad():
        a, wa = fused(x, MASK)
        monkeypatch.setattr(F, "scaled_dot_product_attention", fused_kernel_called)
        b, wb = explicit(x, MASK)
    assert wa is None and wb is None
    assert torch.allclose(a[MASK], b[MASK], atol=1e-5)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_residual_dropout_drops_the_feed_forward_branch(norm):
    """The block's dropout acts on both residual branches and inside the feed-forward: at rate 1
    in training only the residual stream is left (normalised, under post-norm)."""
    torch.manual_seed(0)
    block = TransformerEncoderBlock(E, NH, FF, dropout=1.0, attention_dropout=0.0, norm=norm)
    x = torch.randn(2, 5, E)
    out = block.train()(x, MASK)[0]
    expected = x if norm == "pre" else block.norm2(block.norm1(x))
    assert torch.allclose(out, expected, atol=1e-6)
    feed_forward = block.feed_forward  # all hidden units dropped: linear2's bias alone
    assert torch.allclose(feed_forward(x), feed_forward.linear2.bias.expand_as(x))


@pytest.mark.parametrize("fused_attention", [True, False])
def test_attention_dropout_only_in_training(fused_attention):
    """model.attention_dropout acts on both attention paths (residual dropout off, so it alone)."""
    torch.manual_seed(0)
    block = TransformerEncoderBlock(
        E, NH, FF, dropout=0.0, attention_dropout=0.5, fused_attention=fused_attention
    ).eval()
    x = torch.randn(2, 5, E)
    evaluated = block(x, MASK)[0]
    assert torch.equal(evaluated, block(x, MASK)[0])
    block.train()
    a, b = block(x, MASK)[0], block(x, MASK)[0]
    assert not torch.allclose(a[MASK], b[MASK]) and not torch.allclose(a[MASK], evaluated[MASK])


def test_gradients_flow():
    block = TransformerEncoderBlock(E, NH, FF)
    x = torch.randn(2, 5, E, requires_grad=True)
    block(x, MASK)[0].sum().backward()
    assert x.grad is not None and all(p.grad is not None for p in block.parameters())


@pytest.mark.parametrize("block", [TransformerEncoderBlock, TorchEncoderBlock])
def test_bad_norm_or_activation_names_the_value_and_the_choices(block):
    with pytest.raises(ValueError, match=r"^norm='mid' is not one of post, pre$"):
        block(E, NH, FF, norm="mid")
    with pytest.raises(ValueError, match=r"^activation='tanh' is not one of relu, gelu$"):
        block(E, NH, FF, activation="tanh")


def test_block_errors():
    with pytest.raises(ValueError, match="num_heads=3 must be a positive divisor"):
        TransformerEncoderBlock(E, 3, FF)
    with pytest.raises(ValueError, match="num_heads=3 must be a positive divisor"):
        TorchEncoderBlock(E, 3, FF)
    with pytest.raises(ValueError, match="attention_dropout=0.2 must equal dropout=0.1"):
        TorchEncoderBlock(E, NH, FF, dropout=0.1, attention_dropout=0.2)
