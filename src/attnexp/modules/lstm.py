"""The token encoder of the BiLSTM text models: embedding -> dropout -> (Bi)LSTM over real tokens.

Shapes: B sequences, T tokens (padded), E embedding size, H hidden size per direction,
D = 2H (bidirectional) output features per token. `mask` (B, T) is True on real tokens.
"""

import torch
from torch import nn

from attnexp.modules.rnn import run_padded


class LSTMEncoder(nn.Module):
    """Embedding -> dropout -> (Bi)LSTM that never reads padding -> (B, T, D), zeros on padding.

    A review's features do not depend on how long the other reviews of its batch are. Two ways to
    get there, same numbers (`rnn_impl`):
    - "packed": `pack_padded_sequence(enforce_sorted=False)`. It needs the lengths on the host
      (`lengths.cpu()`): on CUDA a device sync every step, so the CPU cannot queue the next
      step's kernels while the GPU runs this one.
    - "reversed" (padded, `modules/rnn.py`): padding sits after each review, so the forward
      direction runs on the padded batch as is, and the backward direction on each review
      reversed within its own length, then reversed back. No host sync; on CUDA each direction is a unidirectional,
      unpacked cuDNN call: the only input for which cuDNN may pick its persistent small-hidden
      kernels (never for packed input). On CPU this is 10-20x faster than packing (torch 2.13, a 128 x 200 batch,
      one core: 6.2 s vs 0.57 s per forward + backward, bench/bench_lstm_impl.py), because the
      unpacked LSTM runs on oneDNN.
    - "auto" (default): the fastest measured on the device (`AUTO_IMPL`); "reversed" on both.
    """

    RNN_IMPLS = ("auto", "packed", "reversed")
    # What "auto" runs, per device type (others: "reversed"). CPU: oneDNN (see above); CUDA: no
    # host sync, and cuDNN's persistent kernels (bench/bench_gpu.py measures packed against it).
    AUTO_IMPL = {"cpu": "reversed", "cuda": "reversed"}
    # "normal": torch's N(0, 1); "xavier": Xavier-uniform, Paddle's and Keras' (small) default.
    EMBED_INITS = ("normal", "xavier")

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int = 128,
        hidden_size: int = 128,
        num_layers: int = 1,
        dropout: float = 0.0,
        embed_dropout: float = 0.0,
        bidirectional: bool = True,
        pad_id: int = 0,
        rnn_impl: str = "auto",
        embed_init: str = "normal",
    ) -> None:
        super().__init__()
        if rnn_impl not in self.RNN_IMPLS:
            raise ValueError(f"rnn_impl='{rnn_impl}' is not one of {', '.join(self.RNN_IMPLS)}")
        if embed_init not in self.EMBED_INITS:
            raise ValueError(
                f"embed_init='{embed_init}' is not one of {', '.join(self.EMBED_INITS)}"
            )
        self.rnn_impl = rnn_impl
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        if embed_init == "xavier":
            nn.init.xavier_uniform_(self.embedding.weight)
            with torch.no_grad():
                self.embedding.weight[pad_id].zero_()
        self.embed_dropout = nn.Dropout(embed_dropout)
        self.lstm = nn.LSTM(
            embed_dim,
            hidden_size,
            num_layers=num_layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.output_dim = hidden_size * (2 if bidirectional else 1)

    def forward(self, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """input_ids (B, T), mask (B, T) -> features (B, T, D)."""
        embedded = self.embed_dropout(self.embedding(input_ids))  # (B, T, E)
        # An empty review still needs length >= 1; its output is masked away below.
        lengths = mask.sum(dim=1).clamp(min=1)
        impl = self.rnn_impl
        if impl == "auto":
            impl = self.AUTO_IMPL.get(embedded.device.type, "reversed")
        out = (
            self._packed(embedded, lengths)
            if impl == "packed"
            else self._reversed(embedded, lengths)
        )
        return out * mask.unsqueeze(-1)

    def _packed(self, embedded: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        T = embedded.shape[1]
        packed = nn.utils.rnn.pack_padded_sequence(
            embedded, lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        out, _ = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=T)
        return out  # (B, T, D)

    def _reversed(self, embedded: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return run_padded(self.lstm, embedded, lengths, final_cell=False).states  # (B, T, D)
