import math

import pytest
import torch

from attnexp.errors import ConfigError
from attnexp.modules.embeddings import (
    PairEmbeddings,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    sinusoidal_table,
)


def test_sinusoidal_values_at_known_positions():
    E = 8
    table = sinusoidal_table(16, E)
    assert torch.allclose(table[0, 0::2], torch.zeros(E // 2))  # sin(0)
    assert torch.allclose(table[0, 1::2], torch.ones(E // 2))  # cos(0)
    assert table[1, 0] == pytest.approx(math.sin(1.0), abs=1e-6)
    assert table[1, 1] == pytest.approx(math.cos(1.0), abs=1e-6)
    # PE[p, 2i] = sin(p / 10000^(2i/E)), PE[p, 2i+1] = cos(...)
    p, i = 5, 2
    assert table[p, 2 * i] == pytest.approx(math.sin(p / 10000 ** (2 * i / E)), abs=1e-5)
    assert table[p, 2 * i + 1] == pytest.approx(math.cos(p / 10000 ** (2 * i / E)), abs=1e-5)
    assert torch.equal(SinusoidalPositionalEncoding(16, E)(3), table[:3])


def test_token_embedding_is_scaled_by_sqrt_dim_and_pad_is_zero():
    emb = TokenEmbedding(10, 16, padding_idx=0)
    ids = torch.tensor([[0, 3]])
    out = emb(ids)
    assert torch.allclose(out[0, 1], emb.embedding.weight[3] * 4.0)
    assert torch.equal(out[0, 0], torch.zeros(16))
    # N(0, 1/E) weights: the scaled embedding starts at unit variance, as the positions are
    torch.manual_seed(0)
    scaled = TokenEmbedding(1000, 64)(torch.arange(1000))
    assert scaled.std().item() == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_pair_embeddings_shapes_and_segments_matter(position):
    torch.manual_seed(0)
    emb = PairEmbeddings(20, 8, max_len=12, position=position, dropout=0.0).eval()
    ids = torch.tensor([[2, 5, 6, 3, 7, 3]])
    out_a = emb(ids, torch.tensor([[0, 0, 0, 0, 1, 1]]))
    out_b = emb(ids, torch.tensor([[0, 0, 0, 0, 0, 0]]))
    assert out_a.shape == (1, 6, 8)
    # LayerNorm'd per position: the blocks get inputs of mean 0 and variance 1 at every position
    torch.testing.assert_close(out_a.mean(-1), torch.zeros(1, 6), atol=1e-5, rtol=0)
    torch.testing.assert_close(out_a.var(-1, unbiased=False), torch.ones(1, 6), atol=1e-3, rtol=0)
    assert torch.allclose(out_a[0, :4], out_b[0, :4]) and not torch.allclose(
        out_a[0, 4:], out_b[0, 4:]
    )
    # same token at different positions differs (positional information): in out_b both are in
    # segment 0, so only the positions can tell them apart (in out_a the segments differ too)
    assert not torch.allclose(out_b[0, 3], out_b[0, 5])
    # the same tokens and segments one position further right embed differently
    shifted = emb(torch.tensor([[2, 2, 5, 6, 3, 7, 3]]), torch.tensor([[0, 0, 0, 0, 0, 1, 1]]))
    assert not torch.allclose(shifted[0, 1:], out_a[0])


def test_pair_embeddings_errors():
    with pytest.raises(ValueError, match="position='rope' is not one of sinusoidal, learned"):
        PairEmbeddings(20, 8, max_len=12, position="rope")
    emb = PairEmbeddings(20, 8, max_len=4)
    with pytest.raises(ConfigError, match="longer than the model's max_seq_len=4"):
        emb(torch.zeros(1, 5, dtype=torch.long), torch.zeros(1, 5, dtype=torch.long))
