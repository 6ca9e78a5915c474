"""The Transformer decoder's attention: the weights path and the fused kernel agree, padded source
positions get weight 0 and change nothing, a step sees no later step, an empty source stays
finite."""

import torch

from attnexp.modules.masking import masked_softmax
from attnexp.modules.mhsa import MultiHeadAttention, attendable_keys, attention_weights
from attnexp.modules.transformer_decoder import TransformerDecoderBlock

B, U, S, E, NH = 3, 5, 7, 16, 4
SRC_MASK = torch.tensor([[True] * 7, [True] * 4 + [False] * 3, [True] * 2 + [False] * 5])
TGT_MASK = torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True] * 5])


def block(norm: str = "pre") -> TransformerDecoderBlock:
    torch.manual_seed(0)
    return TransformerDecoderBlock(E, NH, 32, dropout=0.0, attention_dropout=0.0, norm=norm).eval()


def decoder_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """Target-side states x (B, U, E) and the encoder's memory (B, S, E)."""
    torch.manual_seed(1)
    return torch.randn(B, U, E), torch.randn(B, S, E)


def test_weights_are_the_masked_softmax_of_scaled_scores_per_query():
    torch.manual_seed(0)
    q, k = torch.randn(B, NH, U, 4), torch.randn(B, NH, S, 4)
    per_query = torch.rand(B, U, S) > 0.5
    per_query[0, 0] = False  # a query with no key: it sees them all
    for mask in (SRC_MASK, per_query):
        expected = masked_softmax(q @ k.transpose(-1, -2) / 2.0, attendable_keys(mask))
        torch.testing.assert_close(attention_weights(q, k, attendable_keys(mask)), expected)
    assert attendable_keys(per_query)[0, 0, 0].all()


def test_the_weights_path_and_the_fused_kernel_agree():
    x, memory = decoder_inputs()
    for norm in ("pre", "post"):
        decoder = block(norm)
        with torch.no_grad():
            fused, none = decoder(x, memory, TGT_MASK, SRC_MASK)
            explicit, weights = decoder(x, memory, TGT_MASK, SRC_MASK, need_weights=True)
        assert none is None and weights.shape == (B, NH, U, S)
        torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)


def test_padded_source_positions_get_weight_zero_and_change_nothing():
    decoder = block()
    x, memory = decoder_inputs()
    changed = memory.clone()
    changed[~SRC_MASK] = 100.0
    with torch.no_grad():
        out, weights = decoder(x, memory, TGT_MASK, SRC_MASK, need_weights=True)
        out_changed, _ = decoder(x, changed, TGT_MASK, SRC_MASK, need_weights=True)
        fused_changed, _ = decoder(x, changed, TGT_MASK, SRC_MASK)
    assert torch.all(weights.masked_select(~SRC_MASK[:, None, None, :]) == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, NH, U))
    torch.testing.assert_close(out_changed, out)
    torch.testing.assert_close(fused_changed, out, atol=1e-5, rtol=1e-5)


def test_a_step_sees_no_later_step():
    decoder = block()
    x, memory = decoder_inputs()
    later = x.clone()
    later[:, 3:] = torch.randn(B, U - 3, E)
    with torch.no_grad():
        out, _ = decoder(x, memory, TGT_MASK, SRC_MASK)
        out_later, _ = decoder(later, memory, TGT_MASK, SRC_MASK)
    torch.testing.assert_close(out_later[:, :3], out[:, :3])
    assert not torch.allclose(out_later[:, 3:], out[:, 3:])


def test_an_empty_source_gives_a_finite_output_in_both_paths():
    torch.manual_seed(0)
    attention = MultiHeadAttention(E, NH, fused_qkv=False).eval()
    query, memory = torch.randn(B, U, E), torch.randn(B, S, E)
    empty = SRC_MASK.clone()
    empty[2] = False
    with torch.no_grad():
        fused, _ = attention(query, empty, memory=memory)
        explicit, weights = attention(query, empty, need_weights=True, memory=memory)
    assert torch.isfinite(fused).all() and torch.isfinite(explicit).all()
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights[2].sum(-1), torch.ones(NH, U))
