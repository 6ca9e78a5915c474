"""The encoder-decoders: padding is ignored, attention leaves it out, teacher forcing feeds the
reference, every option builds."""

from functools import partial

import pytest
import torch
from config_refusals import refusal

from attnexp.errors import ConfigError
from attnexp.models.seq2seq import RNNEncoder, Seq2Seq
from attnexp.models.transformer_seq2seq import TransformerSeq2Seq
from attnexp.modules.scorers import AdditiveScorer, BilinearScorer, DotScorer, ScaledDotScorer
from attnexp.schema import rule_for

V = 16
SCORERS = [AdditiveScorer, BilinearScorer, DotScorer, ScaledDotScorer]


def batch(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (3, 6), generator=generator)
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[0, 4:] = False
    mask[1, 2:] = False
    tgt_in = torch.randint(4, V, (3, 5), generator=generator)
    tgt_in[:, 0] = 2
    return src, mask, tgt_in


def models():
    torch.manual_seed(0)
    built = [Seq2Seq(V, V, partial(s), embed_dim=8, hidden_size=8, num_layers=2) for s in SCORERS]
    built.append(Seq2Seq(V, V, None, attention="none", embed_dim=8, hidden_size=8))
    built.append(
        Seq2Seq(
            V,
            V,
            partial(AdditiveScorer),
            cell="lstm",
            bidirectional=True,
            bridge=True,
            input_feeding=True,
            tie_embeddings=True,
            embed_dim=8,
            hidden_size=8,
        )
    )
    built.append(
        TransformerSeq2Seq(V, V, max_len=16, hidden_size=8, num_layers=2, num_heads=2, ffn_size=16)
    )
    return built


@pytest.mark.parametrize("model", models(), ids=lambda m: type(m).__name__)
def test_padded_source_positions_get_no_attention_and_change_nothing(model):
    model.eval()
    src, mask, tgt_in = batch()
    with torch.no_grad():
        out = model(src, mask, tgt_in, return_attention=True)
        other = src.masked_fill(~mask, 7)
        again = model(other, mask, tgt_in)
    assert out.logits.shape == (3, 5, V)
    assert torch.allclose(out.logits, again.logits, atol=1e-5)
    if out.attention is not None:
        assert out.attention.shape == (3, 5, 6)
        assert (out.attention.masked_select(~mask[:, None, :].expand(-1, 5, -1)) == 0).all()
        assert torch.allclose(out.attention.sum(-1), torch.ones(3, 5), atol=1e-5)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_encoder_equals_packed_sequences(cell, num_layers, bidirectional):
    """The encoder runs padded (no host sync): its states on real positions (zeros on padding),
    final states per layer and gradients are those of its RNN on packed sources."""
    torch.manual_seed(0)
    encoder = RNNEncoder(V, 8, 8, num_layers, cell, bidirectional, dropout=0.0).eval()
    src, mask, _ = batch()
    mask[2, :] = False  # an empty source reads its first pad, as the packed path did
    embedded = encoder.embedding(src)
    packed = torch.nn.utils.rnn.pack_padded_sequence(
        embedded, mask.sum(1).clamp(min=1), batch_first=True, enforce_sorted=False
    )
    out, final = encoder.rnn(packed)
    states, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=6)
    finals = final if cell == "lstm" else (final,)
    reference = [states, *(encoder._per_layer(f) for f in finals)]
    ours = [t for t in encoder(src, mask) if t is not None]
    assert len(ours) == len(reference) == (3 if cell == "lstm" else 2)
    weights = [torch.randn_like(t) for t in reference]
    grads = [
        torch.autograd.grad(
            sum((t * w).sum() for t, w in zip(ts, weights, strict=True)), encoder.rnn.parameters()
        )
        for ts in (ours, reference)
    ]
    for a, b in zip(ours + list(grads[0]), reference + list(grads[1]), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model", models(), ids=lambda m: type(m).__name__)
def test_forward_equals_stepping_with_the_reference(model):
    """The teacher-forced forward is the step-by-step decoder fed the reference tokens."""
    model.eval()
    src, mask, tgt_in = batch(1)
    with torch.no_grad():
        logits = model(src, mask, tgt_in).logits
        state, stepped = model.start(src, mask), []
        for t in range(tgt_in.shape[1]):
            step_logits, state, _ = model.step(state, tgt_in[:, t])
            stepped.append(step_logits)
    assert torch.allclose(logits, torch.stack(stepped, 1), atol=1e-5)


def test_training_forward_projects_once_with_the_gradients_of_stepping():
    """Teacher forced in training, the output layer runs once over all steps: the logits and
    every gradient are those of the step-by-step decoder (dropout 0, so no masks differ)."""
    torch.manual_seed(0)
    model = Seq2Seq(V, V, partial(AdditiveScorer), embed_dim=8, hidden_size=8, dropout=0.0)
    model.train()
    src, mask, tgt_in = batch(3)
    target = torch.randint(0, V, tgt_in.shape, generator=torch.Generator().manual_seed(1))

    def gradients(logits):
        model.zero_grad()
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten()).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    logits = model(src, mask, tgt_in).logits
    once = gradients(logits)
    state, stepped = model.start(src, mask), []
    for t in range(tgt_in.shape[1]):
        step_logits, state, _ = model.step(state, tgt_in[:, t])
        stepped.append(step_logits)
    stepped = torch.stack(stepped, 1)
    per_step = gradients(stepped)
    torch.testing.assert_close(logits, stepped, rtol=1e-5, atol=1e-6)
    assert once.keys() == per_step.keys() and "generator.weight" in once
    for name in once:
        torch.testing.assert_close(once[name], per_step[name], rtol=1e-4, atol=1e-6, msg=name)


def test_teacher_forcing_one_feeds_the_reference_and_zero_the_models_guess():
    torch.manual_seed(0)
    src, mask, tgt_in = batch(2)
    forced = Seq2Seq(
        V, V, partial(AdditiveScorer), embed_dim=8, hidden_size=8, dropout=0.0, teacher_forcing=1.0
    )
    free = Seq2Seq(
        V, V, partial(AdditiveScorer), embed_dim=8, hidden_size=8, dropout=0.0, teacher_forcing=0.0
    )
    free.load_state_dict(forced.state_dict())
    forced.train(), free.train()
    with torch.no_grad():
        reference = forced(src, mask, tgt_in).logits
        own = free(src, mask, tgt_in).logits
        state, guesses, prev = free.start(src, mask), [], tgt_in[:, 0]
        for _ in range(tgt_in.shape[1]):
            step_logits, state, _ = free.step(state, prev)
            guesses.append(step_logits)
            prev = step_logits.argmax(-1)
    assert torch.allclose(own, torch.stack(guesses, 1), atol=1e-5)
    assert not torch.allclose(reference[:, 1:], own[:, 1:])
    assert torch.allclose(reference[:, 0], own[:, 0], atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, fix",
    [
        ({"cell": "rnn"}, "(set model.cell=...)"),
        ({"attention": "luong"}, "(set model.attention=...)"),
        ({"bidirectional": True}, "(set model.bidirectional=... or model.bridge=...)"),
    ],
)
def test_bad_settings_name_the_key(kwargs, fix):
    sizes = {"src_vocab_size": V, "tgt_vocab_size": V}
    assert refusal(Seq2Seq, runtime=sizes, **{"attention": "none", **kwargs}).endswith(fix)


def test_teacher_forcing_is_a_probability():
    """The schema refuses it before torch (attnexp.schema)."""
    with pytest.raises(
        ConfigError, match=r"model.teacher_forcing=1.5 must be a number from 0 to 1"
    ):
        rule_for("model.teacher_forcing").check("model.teacher_forcing", 1.5)
