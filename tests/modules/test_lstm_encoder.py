import pytest
import torch
import torch.nn.functional as F
from imdb_data import token_batch

from attnexp.errors import ConfigError
from attnexp.modules.lstm import LSTMEncoder
from attnexp.schema import rule_for

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


@pytest.mark.parametrize("rnn_impl", ["packed", "reversed"])
def test_padding_past_the_longest_sequence_changes_nothing(batch, rnn_impl):
    """A batch whose every row ends in padding (padded to a fixed width, say) keeps its T: the
    packed output is padded back to the input's width, not to the longest sequence."""
    ids, mask = batch
    encoder = LSTMEncoder(V, embed_dim=8, hidden_size=4, rnn_impl=rnn_impl).eval()
    wider = encoder(F.pad(ids, (0, 2)), F.pad(mask, (0, 2)))  # (B, T + 2, D)
    assert wider.shape == (B, T + 2, 8) and (wider[:, T:] == 0).all()
    torch.testing.assert_close(wider[:, :T], encoder(ids, mask), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rnn_impl", ["packed", "reversed"])
def test_one_direction_gives_hidden_size_features(batch, rnn_impl):
    ids, mask = batch
    encoder = LSTMEncoder(V, embed_dim=8, hidden_size=4, bidirectional=False, rnn_impl=rnn_impl)
    assert encoder(ids, mask).shape == (B, T, encoder.output_dim) and encoder.output_dim == 4


@pytest.mark.parametrize("num_layers", [1, 2])
def test_reversed_impl_equals_packed(batch, num_layers):
    ids, mask = batch
    encoder = LSTMEncoder(
        V, embed_dim=8, hidden_size=4, num_layers=num_layers, rnn_impl="packed"
    ).eval()
    packed = encoder(ids, mask)
    encoder.rnn_impl = "reversed"
    torch.testing.assert_close(encoder(ids, mask), packed, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="rnn_impl='cudnn' is not one of auto, packed, reversed"):
        LSTMEncoder(V, rnn_impl="cudnn")


@pytest.mark.parametrize("rnn_impl", ["packed", "reversed"])
def test_dropout_between_layers_only_in_training(batch, rnn_impl):
    """model.dropout drops the features between stacked LSTM layers in both implementations
    (the reversed one runs each layer itself, so it must apply it itself)."""
    ids, mask = batch
    torch.manual_seed(0)
    encoder = LSTMEncoder(
        V, embed_dim=8, hidden_size=4, num_layers=2, dropout=0.5, rnn_impl=rnn_impl
    ).eval()
    evaluated = encoder(ids, mask)
    assert torch.equal(evaluated, encoder(ids, mask))
    encoder.train()
    a, b = encoder(ids, mask), encoder(ids, mask)
    assert not torch.allclose(a, b) and not torch.allclose(a, evaluated)
    assert (a[mask] != 0).all()  # between layers only: the top layer's features are not dropped


@pytest.mark.parametrize("rnn_impl", ["packed", "reversed"])
def test_an_empty_sequence_gives_zero_features(batch, rnn_impl):
    """A review with no tokens left (all padding) must not stop the batch: its features are 0."""
    ids, mask = batch
    mask[2] = False
    encoder = LSTMEncoder(V, embed_dim=8, hidden_size=4, rnn_impl=rnn_impl).eval()
    out = encoder(ids, mask)
    assert torch.isfinite(out).all() and (out[2] == 0).all() and (out[0] != 0).all()


def test_auto_runs_the_reversed_impl_on_cpu(batch, monkeypatch):
    """On CPU packing is 10-20x slower than the reversed impl: auto must not pick it there."""

    def packed(*args):
        raise AssertionError("rnn_impl=auto packed the batch on CPU")

    monkeypatch.setattr(LSTMEncoder, "_packed", packed)
    LSTMEncoder(V, embed_dim=8, hidden_size=4)(*batch)


@pytest.mark.parametrize("key", ["embed_dim", "hidden_size", "num_layers"])
def test_sizes_must_be_positive(key):
    """The schema refuses them before torch (attnexp.schema), naming the key."""
    with pytest.raises(ConfigError, match=rf"model\.{key}=0 must be a whole number >= 1"):
        rule_for(f"model.{key}").check(f"model.{key}", 0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")
def test_padded_equals_packed_on_cuda():
    """cuDNN: the padded reversal (unidirectional calls, the persistent kernels' input at hidden
    128) gives the packed path's features on real positions, and the same gradients."""
    torch.manual_seed(0)
    B, T = 16, 40
    lengths = torch.randint(1, T + 1, (B,))
    mask = torch.arange(T)[None, :] < lengths[:, None]
    ids = torch.randint(2, V, (B, T)) * mask
    encoder = LSTMEncoder(V, embed_dim=128, hidden_size=128, rnn_impl="packed").cuda()
    ids, mask = ids.cuda(), mask.cuda()
    outputs, grads = {}, {}
    # cuDNN's RNNs multiply in TF32 by default, which alone moves outputs by ~5e-5: compared in
    # full float32, what differs is the kernels, not the precision
    tf32, torch.backends.cudnn.allow_tf32 = torch.backends.cudnn.allow_tf32, False
    try:
        for impl in ("packed", "reversed"):
            encoder.rnn_impl = impl
            encoder.zero_grad()
            out = encoder(ids, mask)
            out.square().sum().backward()
            outputs[impl] = out
            grads[impl] = [p.grad.clone() for p in encoder.lstm.parameters()]
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    torch.testing.assert_close(outputs["reversed"], outputs["packed"], rtol=1e-4, atol=1e-5)
    for a, b in zip(grads["reversed"], grads["packed"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)
