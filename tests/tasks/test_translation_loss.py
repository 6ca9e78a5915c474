"""The translation task's token loss: label smoothing and the recorded NLL are F.cross_entropy's,
over the real target tokens only."""

from functools import partial

import pytest
import torch
import torch.nn.functional as F

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
