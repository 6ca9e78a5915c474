import pytest
import torch
from imdb_data import token_batch

from attnexp.errors import ConfigError
from attnexp.modules.lstm import LSTMEncoder

V, B, T = 50, 3, 7


@pytest.fixture
def batch():
    return token_batch(V)  # lengths 7, 4, 1


@pytest.mark.parametrize("rnn_impl", ["packed", "reversed"])  # "auto" is one of the two
def test_packed_equals_unpacked_on_real_positions(batch, rnn_impl):
    ids, mask = batch
    encoder = LSTMEncoder(V, embed_dim=8, hidden_size=4, num_layers=2, rnn_impl=rnn_impl).eval()
    out = encoder(ids, mask)
    assert out.shape == (B, T, 8)
    for b in range(B):
        n = int(mask[b].sum())
        alone, _ = encoder.lstm(encoder.embedding(ids[b : b + 1, :n]))  # no padding at all
        torch.testing.assert_close(out[b, :n], alone[0], rtol=1e-5, atol=1e-6)
        assert (out[b, n:] == 0).all()


@pytest.mark.parametrize("num_layers", [1, 2])
def test_reversed_impl_equals_packed(batch, num_layers):
    ids, mask = batch
    encoder = LSTMEncoder(
        V, embed_dim=8, hidden_size=4, num_layers=num_layers, rnn_impl="packed"
    ).eval()
    packed = encoder(ids, mask)
    encoder.rnn_impl = "reversed"
    torch.testing.assert_close(encoder(ids, mask), packed, rtol=1e-5, atol=1e-6)
    with pytest.raises(ConfigError, match="model.rnn_impl"):
        LSTMEncoder(V, rnn_impl="cudnn")


@pytest.mark.parametrize("key", ["embed_dim", "hidden_size", "num_layers"])
def test_sizes_must_be_positive(key):
    with pytest.raises(ConfigError, match=rf"model\.{key}=0 must be a positive integer"):
        LSTMEncoder(V, **{key: 0})
