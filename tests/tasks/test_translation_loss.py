"""The translation task's token loss: label smoothing and the recorded NLL are F.cross_entropy's,
over the real target tokens only; the free-running loss feeds the decoder its own argmax."""

import math
from functools import partial

import pytest
import torch
import torch.nn.functional as F

from attnexp.models.output import ModelOutput
from attnexp.models.seq2seq import Seq2Seq
from attnexp.modules.scorers import AdditiveScorer
from attnexp.tasks.translation import MODEL_INPUTS, TranslationTask

V = 16


def batch() -> dict:
    generator = torch.Generator().manual_seed(0)
    src_ids = torch.randint(4, V, (3, 6), generator=generator)
    src_mask = torch.arange(6)[None, :] < torch.tensor([[6], [3], [1]])
    tgt_out = torch.randint(3, V, (3, 5), generator=generator)
    tgt_mask = torch.arange(5)[None, :] < torch.tensor([[5], [2], [4]])
    tgt_out = tgt_out.masked_fill(~tgt_mask, 0)
    tgt_in = torch.cat([torch.full((3, 1), 2), tgt_out[:, :-1]], dim=1)
    return dict(
        src_ids=src_ids, src_mask=src_mask, tgt_in=tgt_in, tgt_out=tgt_out, tgt_mask=tgt_mask
    )


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_loss_and_nll_are_cross_entropys_on_real_tokens(label_smoothing):
    torch.manual_seed(0)
    model = Seq2Seq(V, V, partial(AdditiveScorer), embed_dim=8, hidden_size=8, dropout=0.0)
    task = TranslationTask(
        model, V, optimizer=partial(torch.optim.Adam), label_smoothing=label_smoothing
    )
    data = batch()
    loss = task._shared_step(data, "train")
    grads = torch.autograd.grad(loss, list(model.parameters()))
    logits = model(**{k: data[k] for k in MODEL_INPUTS}).logits  # (B, U, V)
    mask = data["tgt_mask"]
    per_token = F.cross_entropy(
        logits[mask], data["tgt_out"][mask], label_smoothing=label_smoothing, reduction="none"
    )
    expected = per_token.mean()
    torch.testing.assert_close(loss, expected)
    for ours, theirs in zip(
        grads, torch.autograd.grad(expected, list(model.parameters())), strict=True
    ):
        torch.testing.assert_close(ours, theirs)
    nll = F.cross_entropy(logits[mask], data["tgt_out"][mask], reduction="sum")
    torch.testing.assert_close(task._sums["train/nll"], nll.detach())
    assert int(task._sums["train/tokens"]) == int(mask.sum())
    assert "train/acc" in task._token_metrics("train")
    task._shared_step(data, "train", count_accuracy=False)  # a batch the accuracy skips
    assert "train/acc" not in task._token_metrics("train")


class Bigram(torch.nn.Module):
    """A toy decoder whose next-token log-probabilities depend on the previous token only."""

    input_kind = "translation"

    def __init__(self, log_probs: torch.Tensor):
        super().__init__()
        self.log_probs = log_probs  # (V, V): row = previous token

    def forward(self, src_ids, src_mask, tgt_in):
        return ModelOutput(self.log_probs[tgt_in], None)  # (B, U, V)

    def start(self, src_ids, src_mask):
        return {"src_mask": src_mask}

    def step(self, state, prev):
        return self.log_probs[prev], state, None


def test_the_free_running_loss_feeds_the_decoder_its_own_argmax():
    """Teacher forcing 0 (bentrevett's `evaluate`): from BOS the decoder reads its argmax, up to
    the reference's length, the loss taken against the reference; by hand on a bigram toy."""
    BOS, EOS = 2, 3
    p = torch.tensor(
        [  # next-token probabilities after tokens 0..4: argmax 4 after BOS, 3 after 4
            [0.2, 0.2, 0.2, 0.2, 0.2],
            [0.1, 0.1, 0.0, 0.5, 0.3],
            [0.1, 0.2, 0.0, 0.1, 0.6],
            [0.1, 0.5, 0.0, 0.2, 0.2],
            [0.3, 0.1, 0.0, 0.4, 0.2],
        ]
    )
    task = TranslationTask(Bigram(p.log()), 5, optimizer=partial(torch.optim.Adam))
    data = dict(  # references "1 EOS" and "0 1 EOS"
        src_ids=torch.ones(2, 1, dtype=torch.long),
        src_mask=torch.ones(2, 1, dtype=torch.bool),
        tgt_in=torch.tensor([[BOS, 1, 0], [BOS, 0, 1]]),
        tgt_out=torch.tensor([[1, EOS, 0], [0, 1, EOS]]),
        tgt_mask=torch.tensor([[True, True, False], [True, True, True]]),
    )
    task._shared_step(data, "test")
    task._free_running_step(data, "test")
    metrics = task._token_metrics("test")
    # Teacher forced: p(1|BOS) p(EOS|1); p(0|BOS) p(1|0) p(EOS|1).
    forced = -(math.log(0.2) + math.log(0.5) + math.log(0.1) + math.log(0.2) + math.log(0.5)) / 5
    # Free running, both rows read BOS -> 4 -> 3 (argmaxes): p(1|BOS) p(EOS|4); p(0|BOS) p(1|4)
    # p(EOS|3).
    free = -(math.log(0.2) + math.log(0.4) + math.log(0.1) + math.log(0.1) + math.log(0.2)) / 5
    assert metrics["test/loss"] == pytest.approx(forced)
    assert metrics["test/loss_free"] == pytest.approx(free)
    assert metrics["test/ppl_free"] == pytest.approx(math.exp(free))
    assert metrics["test/acc"] == pytest.approx(2 / 5)  # EOS after 1, twice
