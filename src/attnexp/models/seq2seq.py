"""Recurrent encoder-decoder with attention over the source (Bahdanau et al. 2014; Luong et al. 2015).

Shapes: B batch, S source tokens, U target steps, E embedding, H hidden size, L layers,
D encoder directions, C = D * H encoder state size, V target vocabulary.

Each decoder step: the previous top-layer state s_{t-1} queries the encoder states through the
`scorer` (additive = Bahdanau, bilinear = Luong's general, dot / scaled_dot = Luong's dot); padded
source positions get weight 0 (masked_softmax). The context c_t and the previous token's embedding
(and, with input feeding, the previous attentional vector) enter the RNN; the output layer reads
a_t = tanh(W [s_t; c_t; emb]). `attention=none` is the encoder-decoder without attention: the
context is the encoder's final top-layer state at every step (d2l's Seq2SeqDecoder).
"""

from collections.abc import Callable

import torch
from torch import nn

from attnexp.models.output import ModelOutput
from attnexp.modules.masking import masked_softmax
from attnexp.modules.rnn import run_padded
from attnexp.modules.scorers import Scorer

CELLS = {"gru": nn.GRU, "lstm": nn.LSTM}
ATTENTIONS = ("scorer", "none")


def check_seq2seq_args(
    scorer: Callable[..., Scorer] | None,
    attention: str,
    cell: str,
    bidirectional: bool,
    bridge: bool,
) -> None:
    """What `Seq2Seq` can build; the sizes and rates are the schema's (attnexp.schema)."""
    if cell not in CELLS:
        raise ValueError(f"cell='{cell}' is not one of {', '.join(CELLS)}")
    if attention not in ATTENTIONS:
        raise ValueError(f"attention='{attention}' is not one of {', '.join(ATTENTIONS)}")
    if bidirectional and not bridge:
        raise ValueError(
            "bidirectional=true needs bridge=true: the encoder's final state has twice the "
            "decoder's features (or bidirectional=false)"
        )
    if attention == "scorer" and scorer is None:
        raise ValueError("attention=scorer needs a scorer")


class RNNEncoder(nn.Module):
    """ids (B, S), mask (B, S) -> states (B, S, C) and the final state per layer (B, L, C)
    (with the LSTM's cell state (B, L, C), else None)."""

    def __init__(
        self, vocab_size, embed_dim, hidden_size, num_layers, cell, bidirectional, dropout, pad_id=0
    ):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.dropout = nn.Dropout(dropout)
        self.rnn = CELLS[cell](
            embed_dim,
            hidden_size,
            num_layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.num_layers, self.directions = num_layers, 2 if bidirectional else 1

    def _per_layer(self, final: torch.Tensor) -> torch.Tensor:
        LD, B, H = final.shape
        final = final.view(self.num_layers, self.directions, B, H)  # (L, D, B, H)
        return final.permute(2, 0, 1, 3).reshape(
            B, self.num_layers, self.directions * H
        )  # (B, L, C)

    def forward(self, src_ids: torch.Tensor, src_mask: torch.Tensor):
        # An empty source reads its first pad. Padded, not packed: no host sync (modules/rnn.py).
        lengths = src_mask.sum(dim=1).clamp(min=1)  # (B,)
        out = run_padded(self.rnn, self.dropout(self.embedding(src_ids)), lengths)
        cell = self._per_layer(out.cell) if out.cell is not None else None
        return out.states, self._per_layer(out.hidden), cell  # (B, S, C), (B, L, C), (B, L, C)


class Seq2Seq(nn.Module):
    """Embedding -> GRU/LSTM encoder -> attention decoder -> target logits.

    Args:
        src_vocab_size, tgt_vocab_size: from the DataModule.
        scorer: a partial Scorer (key_dim, query_dim), or None with attention=none.
        attention: scorer (attend with `scorer`) | none (no attention: the final encoder state).
        cell: gru | lstm; bidirectional: encoder only (then `bridge` is needed).
        bridge: decoder's initial state = tanh(W final encoder state); else that state itself.
        input_feeding: feed a_{t-1} into the RNN (Luong); tie_embeddings: output layer = target
            embedding (a_t then has the embedding size).
        teacher_forcing: share of training steps fed the reference token (else the model's own
            most probable one); evaluation always feeds the reference.
    """

    input_kind = "translation"
    scorer_free_attentions = ("none",)

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        scorer: Callable[..., Scorer] | None = None,
        attention: str = "scorer",
        embed_dim: int = 256,
        hidden_size: int = 512,
        num_layers: int = 1,
        cell: str = "gru",
        bidirectional: bool = False,
        dropout: float = 0.1,
        bridge: bool = False,
        input_feeding: bool = False,
        tie_embeddings: bool = False,
        teacher_forcing: float = 1.0,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        check_seq2seq_args(scorer, attention, cell, bidirectional, bridge)
        C = hidden_size * (2 if bidirectional else 1)
        self.attention, self.cell, self.teacher_forcing = attention, cell, teacher_forcing
        self.input_feeding = input_feeding
        self.encoder = RNNEncoder(
            src_vocab_size, embed_dim, hidden_size, num_layers, cell, bidirectional, dropout, pad_id
        )
        self.embedding = nn.Embedding(tgt_vocab_size, embed_dim, padding_idx=pad_id)
        self.scorer = scorer(key_dim=C, query_dim=hidden_size) if attention == "scorer" else None
        out_size = embed_dim if tie_embeddings else hidden_size
        self.out_size = out_size
        self.bridge = nn.Linear(C, hidden_size) if bridge else None
        self.bridge_cell = nn.Linear(C, hidden_size) if bridge and cell == "lstm" else None
        rnn_in = embed_dim + C + (out_size if input_feeding else 0)
        self.rnn = CELLS[cell](
            rnn_in,
            hidden_size,
            num_layers,
            batch_first=True,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.combine = nn.Linear(hidden_size + C + embed_dim, out_size)
        self.dropout = nn.Dropout(dropout)
        self.generator = nn.Linear(out_size, tgt_vocab_size)
        if tie_embeddings:
            self.generator.weight = self.embedding.weight

    def start(self, src_ids: torch.Tensor, src_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """Encode; the decoder state as batch-first tensors (see modules/decoding.py)."""
        states, final, final_cell = self.encoder(src_ids, src_mask)
        hidden = torch.tanh(self.bridge(final)) if self.bridge is not None else final  # (B, L, H)
        state = {"memory": states, "src_mask": src_mask, "hidden": hidden, "context": final[:, -1]}
        if self.cell == "lstm":
            state["cell"] = (
                torch.tanh(self.bridge_cell(final_cell))
                if self.bridge_cell is not None
                else final_cell
            )
        if self.input_feeding:
            state["feed"] = states.new_zeros(states.shape[0], self.out_size)
        return state

    def step(self, state: dict[str, torch.Tensor], prev: torch.Tensor):
        """prev (B,) -> logits (B, V), the new state, attention (B, S) or None."""
        attentional, state, weights = self.advance(state, prev)
        return self.generator(self.dropout(attentional)), state, weights

    def advance(self, state: dict[str, torch.Tensor], prev: torch.Tensor):
        """prev (B,) -> the attentional vector a_t (B, O), the new state, attention (B, S) or None."""
        emb = self.dropout(self.embedding(prev))  # (B, E)
        if self.scorer is None:
            context, weights = state["context"], None  # (B, C)
        else:
            scores = self.scorer(state["memory"], state["hidden"][:, -1])  # (B, S)
            weights = masked_softmax(scores, state["src_mask"])
            context = torch.einsum("bs,bsc->bc", weights, state["memory"])  # (B, C)
        parts = [emb, context] + ([state["feed"]] if self.input_feeding else [])
        hidden = state["hidden"].transpose(0, 1).contiguous()  # (L, B, H): what torch's RNNs take
        if self.cell == "lstm":
            out, (h, c) = self.rnn(
                torch.cat(parts, -1)[:, None], (hidden, state["cell"].transpose(0, 1).contiguous())
            )
            state = {**state, "hidden": h.transpose(0, 1), "cell": c.transpose(0, 1)}
        else:
            out, h = self.rnn(torch.cat(parts, -1)[:, None], hidden)  # out (B, 1, H)
            state = {**state, "hidden": h.transpose(0, 1)}
        attentional = torch.tanh(self.combine(torch.cat([out[:, 0], context, emb], -1)))  # (B, O)
        if self.input_feeding:
            state["feed"] = attentional
        return attentional, state, weights

    def forward(
        self,
        src_ids: torch.Tensor,
        src_mask: torch.Tensor,
        tgt_in: torch.Tensor,
        return_attention: bool = False,
    ) -> ModelOutput:
        """src (B, S), tgt_in (B, U) starting with BOS -> logits (B, U, V), attention (B, U, S)."""
        B, U = tgt_in.shape
        state, prev = self.start(src_ids, src_mask), tgt_in[:, 0]
        # Fed the reference at every step, no step needs its logits to go on: the output layer
        # then runs once over all steps, one large matmul (and one gradient of its weight) instead
        # of U small ones, and the (B, U, V) logits are written once rather than stacked.
        sampled = self.training and self.teacher_forcing < 1.0
        outputs, rows = [], []
        for t in range(U):
            if sampled:
                output, state, weights = self.step(state, prev)  # logits (B, V)
            else:
                output, state, weights = self.advance(state, prev)  # a_t (B, O)
            outputs.append(output)
            rows.append(weights)
            if t + 1 < U:
                forced = not sampled or bool(torch.rand(()) < self.teacher_forcing)
                prev = tgt_in[:, t + 1] if forced else output.argmax(dim=-1)
        stacked = torch.stack(outputs, dim=1)  # (B, U, V) logits, or (B, U, O) a_t
        logits = stacked if sampled else self.generator(self.dropout(stacked))  # (B, U, V)
        attention = torch.stack(rows, 1) if return_attention and self.scorer is not None else None
        return ModelOutput(logits, attention)
