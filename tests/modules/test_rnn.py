"""run_padded: torch's GRU/LSTM over a right-padded batch gives what packed input gives (outputs on
real steps, final states at each sequence's true length, gradients), and never reads padding."""

import pytest
import torch
from torch import nn

from attnexp.modules.rnn import run_padded

B, T, E, H = 4, 7, 5, 6  # E input features
LENGTHS = torch.tensor([7, 3, 1, 5])
CASES = [
    (cell, num_layers, bidirectional)
    for cell in (nn.GRU, nn.LSTM)
    for num_layers in (1, 2)
    for bidirectional in (False, True)
]


def case_id(case) -> str:
    cell, num_layers, bidirectional = case
    return f"{cell.__name__}-{num_layers}layer-{'bi' if bidirectional else 'uni'}"


def packed(rnn: nn.RNNBase, inputs: torch.Tensor, lengths: torch.Tensor):
    """The reference: states (B, T, D * H) with zeros on padding, h_n, c_n (or None)."""
    sequences = nn.utils.rnn.pack_padded_sequence(
        inputs, lengths, batch_first=True, enforce_sorted=False
    )
    out, final = rnn(sequences)
    states, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=T)
    hidden, cell = final if isinstance(final, tuple) else (final, None)
    return states, hidden, cell


def gradients(rnn: nn.RNNBase, inputs: torch.Tensor, states, hidden, cell) -> list[torch.Tensor]:
    """Gradients of a loss that reads every output and final state, each with its own weights."""
    torch.manual_seed(1)
    loss = (states * torch.randn_like(states)).sum() + (hidden * torch.randn_like(hidden)).sum()
    if cell is not None:
        loss = loss + (cell * torch.randn_like(cell)).sum()
    return torch.autograd.grad(loss, [inputs, *rnn.parameters()])


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_padded_equals_packed_with_final_states_and_gradients(case):
    cell_type, num_layers, bidirectional = case
    torch.manual_seed(0)
    rnn = cell_type(E, H, num_layers, batch_first=True, bidirectional=bidirectional)
    inputs = torch.randn(B, T, E, requires_grad=True)
    out = run_padded(rnn, inputs, LENGTHS)
    reference = packed(rnn, inputs, LENGTHS)
    D = 2 if bidirectional else 1
    assert out.states.shape == (B, T, D * H) and out.hidden.shape == (num_layers * D, B, H)
    torch.testing.assert_close(out.states, reference[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.hidden, reference[1], rtol=1e-5, atol=1e-6)
    if cell_type is nn.LSTM:
        torch.testing.assert_close(out.cell, reference[2], rtol=1e-5, atol=1e-6)
    else:
        assert out.cell is None and reference[2] is None
    for ours, theirs in zip(
        gradients(rnn, inputs, *out), gradients(rnn, inputs, *reference), strict=True
    ):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
def test_an_lstm_without_its_final_cell_gives_the_same_states(bidirectional):
    """final_cell=False (the classifier's BiLSTM) skips the hold feature: same outputs and h_n,
    gradients included, and no c_n."""
    torch.manual_seed(0)
    rnn = nn.LSTM(E, H, 2, batch_first=True, bidirectional=bidirectional)
    inputs = torch.randn(B, T, E, requires_grad=True)
    lean = run_padded(rnn, inputs, LENGTHS, final_cell=False)
    reference = packed(rnn, inputs, LENGTHS)
    assert lean.cell is None
    torch.testing.assert_close(lean.states, reference[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lean.hidden, reference[1], rtol=1e-5, atol=1e-6)
    ours = gradients(rnn, inputs, lean.states, lean.hidden, None)
    theirs = gradients(rnn, inputs, reference[0], reference[1], None)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_padding_content_changes_nothing_and_gets_no_gradient(case):
    """Padding holds whatever the batch put there: the outputs, the final states and the
    gradients of the real inputs do not depend on it, and it gets gradient 0."""
    cell_type, num_layers, bidirectional = case
    torch.manual_seed(0)
    rnn = cell_type(E, H, num_layers, batch_first=True, bidirectional=bidirectional)
    real = (torch.arange(T)[None, :] < LENGTHS[:, None])[..., None]  # (B, T, 1)
    inputs = torch.randn(B, T, E)
    noisy = torch.where(real, inputs, 50 * torch.randn(B, T, E)).requires_grad_()
    clean = (inputs * real).requires_grad_()
    a, b = run_padded(rnn, noisy, LENGTHS), run_padded(rnn, clean, LENGTHS)
    for x, y in zip(a, b, strict=True):
        if x is not None:
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)
    (grad_noisy,) = torch.autograd.grad(sum(t.sum() for t in a if t is not None), noisy)
    (grad_clean,) = torch.autograd.grad(sum(t.sum() for t in b if t is not None), clean)
    assert (grad_noisy.masked_select(~real) == 0).all()
    torch.testing.assert_close(grad_noisy, grad_clean, rtol=1e-5, atol=1e-6)


def test_dropout_between_layers_only_in_training():
    torch.manual_seed(0)
    rnn = nn.GRU(E, H, 2, batch_first=True, dropout=0.5)
    inputs = torch.randn(B, T, E)
    evaluated = run_padded(rnn.eval(), inputs, LENGTHS).states
    assert torch.equal(evaluated, run_padded(rnn, inputs, LENGTHS).states)
    rnn.train()
    assert not torch.allclose(run_padded(rnn, inputs, LENGTHS).states, evaluated)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_padded_equals_packed_on_cuda_without_host_sync(case):
    """cuDNN, full float32: the padded run equals the packed one, and reads nothing back."""
    cell_type, num_layers, bidirectional = case
    torch.manual_seed(0)
    rnn = cell_type(64, 128, num_layers, batch_first=True, bidirectional=bidirectional).cuda()
    lengths = torch.randint(1, T + 1, (16,))
    lengths[0] = T
    inputs = torch.randn(16, T, 64, device="cuda")
    tf32, torch.backends.cudnn.allow_tf32 = torch.backends.cudnn.allow_tf32, False
    try:
        reference = packed(rnn, inputs, lengths)
        lengths = lengths.cuda()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            out = run_padded(rnn, inputs, lengths)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    for ours, theirs in zip(out, reference, strict=True):
        if theirs is not None:
            torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
