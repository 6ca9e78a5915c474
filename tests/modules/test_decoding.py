"""Greedy and beam-search decoding on toy models whose best translation is known."""

import itertools
import math
from functools import partial

import torch
from torch import nn

from attnexp.models.seq2seq import Seq2Seq
from attnexp.modules.decoding import beam_search, greedy_decode, length_penalty
from attnexp.modules.scorers import AdditiveScorer

BOS, EOS = 2, 3


class TableModel(nn.Module):
    """Next-token log-probabilities from a fixed random table indexed by the previous token and
    the step: small enough to score every hypothesis exhaustively."""

    def __init__(self, vocab: int = 5, steps: int = 4, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.table = torch.randn(steps, vocab, vocab, generator=generator) * 2.0

    def start(self, src_ids, src_mask):
        B = src_ids.shape[0]
        return {"t": torch.zeros(B, dtype=torch.long), "offset": src_ids[:, 0].float()}

    def step(self, state, prev):
        logits = self.table[state["t"], prev] + state["offset"][:, None] * 0.1  # (B, V)
        return logits, {**state, "t": state["t"] + 1}, None


def sequence_score(model, src_row, tokens, alpha):
    """Length-normalised log-probability of tokens + [EOS] under the table model."""
    state, prev, total = model.start(src_row[None], None), torch.tensor([BOS]), 0.0
    for token in [*tokens, EOS]:
        logits, state, _ = model.step(state, prev)
        total += float(torch.log_softmax(logits, -1)[0, token])
        prev = torch.tensor([token])
    return total / length_penalty(len(tokens) + 1, alpha)


def test_beam_search_finds_the_best_hypothesis_of_an_exhaustive_search():
    model, max_len = TableModel(), 4
    src = torch.tensor([[1], [4], [0]])
    words = [0, 1, 4]  # every token but BOS and EOS (0 and 1 stand for padding and unknown here)
    for alpha in (0.0, 1.0):
        found = beam_search(
            model, src, None, BOS, EOS, max_len, beam_size=64, alpha=alpha, n_best=1
        )
        for row, hyps in enumerate(found):
            candidates = [
                list(c) for n in range(max_len) for c in itertools.product(words + [BOS], repeat=n)
            ]
            best = max(candidates, key=lambda c: sequence_score(model, src[row], c, alpha))
            assert hyps[0].tokens == best
            assert math.isclose(
                hyps[0].score, sequence_score(model, src[row], best, alpha), rel_tol=1e-5
            )


def test_beam_size_one_equals_greedy():
    torch.manual_seed(0)
    model = Seq2Seq(20, 20, partial(AdditiveScorer), embed_dim=8, hidden_size=8).eval()
    src = torch.randint(4, 20, (4, 5))
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[0, 3:] = False
    greedy = greedy_decode(model, src, mask, BOS, EOS, max_len=7)
    beam = beam_search(model, src, mask, BOS, EOS, max_len=7, beam_size=1, alpha=0.6)
    for g, (b,) in zip(greedy, beam, strict=True):
        assert g.tokens == b.tokens
        assert math.isclose(g.score, b.score * length_penalty(len(b.tokens) + 1, 0.6), rel_tol=1e-5)
        assert g.attention.shape == (len(g.tokens) + 1, 5) and torch.allclose(
            g.attention, b.attention
        )


def test_decoding_stops_at_eos_and_ends_every_sentence_by_max_len():
    model = TableModel(seed=3)
    src = torch.tensor([[0], [1]])
    for hyps in beam_search(model, src, None, BOS, EOS, max_len=3, beam_size=3, n_best=3):
        assert all(len(h.tokens) <= 2 and EOS not in h.tokens for h in hyps)
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    for hyp in greedy_decode(model, src, None, BOS, EOS, max_len=3):
        assert len(hyp.tokens) <= 2 and EOS not in hyp.tokens


def test_beam_size_one_equals_greedy_where_eos_is_often_the_runner_up():
    """A 5-token table: EOS often ranks second, which beam search must not finish with K = 1."""
    src = torch.arange(5)[:, None]
    for seed in range(8):
        model = TableModel(seed=seed)
        greedy = greedy_decode(model, src, None, BOS, EOS, max_len=4)
        beam = beam_search(model, src, None, BOS, EOS, max_len=4, beam_size=1)
        assert [g.tokens for g in greedy] == [b[0].tokens for b in beam]


def test_banned_tokens_are_never_emitted():
    """Padding and BOS (here 0 and 2) are no part of a translation, though the table favours them."""
    model = TableModel(seed=1)
    model.table[:, :, [0, BOS]] += 10.0
    src = torch.arange(3)[:, None]
    for hyp in greedy_decode(model, src, None, BOS, EOS, max_len=4, banned_ids=(0, BOS)):
        assert not {0, BOS} & set(hyp.tokens)
    for hyps in beam_search(
        model, src, None, BOS, EOS, 4, beam_size=3, n_best=3, banned_ids=(0, BOS)
    ):
        assert all(not {0, BOS} & set(h.tokens) for h in hyps)
