"""Torch's GRU or LSTM over a right-padded batch, giving what packed sequences give, with no host sync.

Shapes: B sequences, T steps (each sequence's real steps first, then padding), E input features,
H hidden size, L layers, D directions (1 or 2).

`pack_padded_sequence` needs the lengths on the host (`lengths.cpu()`): on CUDA a device sync
every step, so the CPU cannot queue the next step's kernels while the GPU runs this one, and
cuDNN never picks its persistent small-hidden kernels for packed input. Here instead:
- Outputs: padding sits after each sequence, so the forward direction runs on the padded batch
  as is, and the backward direction on each sequence reversed within its own length, then
  reversed back. Each layer reads both directions of the layer below, so this runs layer by
  layer, one unidirectional, unpacked call per direction.
- Final h: a direction's state after its last real step is its output there (step len - 1 of its
  own time order), read with a gather.
- Final c (LSTM): not among the outputs, and the c an LSTM returns is the one after the padding.
  So the padding steps are made to keep c: the input gets one more feature, 1 on padding and 0 on
  real steps, whose fixed weights push the input gate's pre-activation to -HOLD and the forget
  gate's to +HOLD. There the sigmoids round to exactly 0 and 1, so c_t = 1 * c_{t-1} + 0 * g and
  the c returned after the padding is exactly the c at the true length; their derivatives are
  exactly 0, so no gradient flows through the padding steps. On real steps the feature is 0 and
  changes nothing (on CPU the outputs are bitwise those without it). The alternatives: a Python
  loop of cell steps that keeps the state on padding is exact too, but launches T steps per layer
  instead of one fused call; packing only for the LSTM would keep its sync.
"""

from typing import NamedTuple

import torch
from torch import nn

# Far past where float32 and float16 sigmoids round to exactly 0 and 1 (|x| > ~104 and ~17), and
# far past any |W x + U h + b| a layer of bounded inputs and sane weights reaches.
HOLD = 1e4


class PaddedRNNOutput(NamedTuple):
    """states (B, T, D * H): top layer, zeros on padding; hidden (L * D, B, H): the state of each
    layer and direction after its sequence's real steps, as torch's h_n; cell: the LSTM's c_n
    (L * D, B, H), None for a GRU."""

    states: torch.Tensor
    hidden: torch.Tensor
    cell: torch.Tensor | None


def run_padded(
    rnn: nn.GRU | nn.LSTM, inputs: torch.Tensor, lengths: torch.Tensor, final_cell: bool = True
) -> PaddedRNNOutput:
    """Run `rnn` (batch_first, with biases) over inputs (B, T, E) whose sequence b is real on its
    first lengths[b] >= 1 steps (a device tensor (B,)); equal to running it on packed input.
    `final_cell=False`: an LSTM's c_n is not needed (cell None), so no hold feature is added and
    the input keeps its width (E, not E + 1: cuDNN's GEMMs prefer multiples of 8)."""
    B, T, _ = inputs.shape
    is_lstm = isinstance(rnn, nn.LSTM)
    holds = is_lstm and final_cell
    positions = torch.arange(T, device=inputs.device).expand(B, T)  # (B, T)
    real = positions < lengths[:, None]  # (B, T)
    # Step t of sequence b <-> step len_b - 1 - t; padding stays where it is.
    flip = torch.where(real, lengths[:, None] - 1 - positions, positions)  # (B, T)
    last = (lengths - 1)[:, None, None].expand(B, 1, rnn.hidden_size)  # (B, 1, H)
    padding = (~real).to(inputs.dtype)[..., None]  # (B, T, 1): the LSTM's hold feature
    zeros = inputs.new_zeros(1, B, rnn.hidden_size)  # (1, B, H): the initial state
    x, hidden, cell = inputs, [], []
    for layer in range(rnn.num_layers):
        outs = []
        for suffix in [""] + (["_reverse"] if rnn.bidirectional else []):
            weights = [
                getattr(rnn, f"{name}_l{layer}{suffix}")
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
            ]
            # (B, T, E): the backward direction reads each sequence reversed within its length
            step_inputs = x.gather(1, flip[..., None].expand_as(x)) if suffix else x
            if is_lstm:
                if holds:
                    weights[0] = torch.cat([weights[0], _hold_column(weights[0])], dim=1)
                    step_inputs = torch.cat([step_inputs, padding.to(step_inputs.dtype)], dim=-1)
                out, _, c = torch.lstm(
                    step_inputs, (zeros, zeros), weights, True, 1, 0.0, rnn.training, False, True
                )
                cell.append(c[0])  # (B, H): c at the true length only when held
            else:
                out, _ = torch.gru(
                    step_inputs, zeros, weights, True, 1, 0.0, rnn.training, False, True
                )
            hidden.append(out.gather(1, last).squeeze(1))  # (B, H)
            outs.append(out.gather(1, flip[..., None].expand_as(out)) if suffix else out)
        x = torch.cat(outs, dim=-1)  # (B, T, D * H)
        if layer < rnn.num_layers - 1 and rnn.dropout > 0:
            x = nn.functional.dropout(x, rnn.dropout, rnn.training)
    return PaddedRNNOutput(
        x * real[..., None],
        torch.stack(hidden),
        torch.stack(cell) if holds else None,
    )


def _hold_column(weight_ih: torch.Tensor) -> torch.Tensor:
    """(4H, 1): the hold feature's weights, gates in torch's order i, f, g, o."""
    H = weight_ih.shape[0] // 4
    column = weight_ih.new_zeros(4 * H, 1)
    column[:H], column[H : 2 * H] = -HOLD, HOLD
    return column
