"""Known-answer tests of the cross-attention measures of encoder-decoders, per (sentence, target
token) pair (tests/faithfulness/known_models.py), and how each real model is read."""

import pytest
import torch

from attnexp.faithfulness import Settings, summarise_columns
from attnexp.faithfulness.translation import Translation, pairs_of, target_steps
from attnexp.faithfulness.translation_measures import explain_translation_batch
from attnexp.models.seq2seq import Seq2Seq
from attnexp.models.transformer_seq2seq import TransformerSeq2Seq
from attnexp.modules.scorers import AdditiveScorer
from tests.faithfulness.known_models import MarkedTranslator, marked_translations

SETTINGS = Settings(ig_steps=16, top_k=2, permutations=8, erasure_steps=4)


def test_a_translator_reading_one_source_token_is_found_by_every_faithful_method():
    batch, marked = marked_translations()
    pairs = pairs_of(batch, max_tokens=2)
    assert len(pairs) == 8 and pairs.step.tolist() == [0, 2] * 4  # the first and last steps
    columns, scores = explain_translation_batch(
        Translation(MarkedTranslator(50.0)), pairs, SETTINGS, torch.Generator().manual_seed(0)
    )
    assert columns["correct"].all()
    for name, importance in scores.items():
        assert torch.equal(importance.argmax(dim=1), marked[pairs.sentence]), name
    # five source tokens: erasing the marked one first changes the step's token at once
    for order in ("attention", "gradient_x_input", "integrated_gradients", "leave_one_out"):
        assert torch.allclose(columns[f"erasure/{order}"], torch.tensor(0.2)), order
    assert columns["permutation/flip_share"].mean() > 0.5
    assert columns["uniform/correct"].eq(0).all()  # the unmarked tokens outweigh it together
    summary = summarise_columns(columns)
    assert summary["examples"] == 8 and summary["accuracy"] == 1.0
    assert summary["uniform"]["accuracy_drop"] == 1.0


def test_uniform_attention_gives_no_agreement_and_no_permutation_effect():
    batch, _ = marked_translations()
    pairs = pairs_of(batch, max_tokens=1)
    columns, _ = explain_translation_batch(
        Translation(MarkedTranslator(0.0)), pairs, SETTINGS, torch.Generator().manual_seed(0)
    )
    # every weight alike: tau is undefined (NaN) and a shuffle changes nothing
    assert torch.isnan(columns["kendall_tau/attention/integrated_gradients"]).all()
    assert columns["permutation/median_change"].abs().max() < 1e-6


def test_steps_are_spread_over_each_reference_and_bounded():
    tgt_mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0]], dtype=torch.bool)
    rows, steps = target_steps(tgt_mask, max_tokens=3)
    assert rows.tolist() == [0, 0, 0, 1, 1] and steps.tolist() == [0, 2, 4, 0, 1]


def translation_batch(vocab: int = 12) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, vocab, (2, 5), generator=g)
    src[1, 3:] = 0
    tgt = torch.randint(4, vocab, (2, 4), generator=g)
    return {
        "src_ids": src,
        "src_mask": src != 0,
        "tgt_in": torch.cat([torch.full((2, 1), 2), tgt[:, :-1]], dim=1),
        "tgt_out": tgt,
        "tgt_mask": torch.ones(2, 4, dtype=torch.bool),
    }


def test_a_recurrent_decoder_keeps_its_weights_under_the_identity_replacement():
    torch.manual_seed(0)
    scorer = lambda **dims: AdditiveScorer(**dims)  # noqa: E731
    model = Seq2Seq(12, 12, scorer, embed_dim=8, hidden_size=8, dropout=0.0)
    translation = Translation(model)
    pairs = pairs_of(translation_batch(), max_tokens=4)
    before = translation.log_probs(pairs)
    with translation.weights_replaced(lambda w, m: w, pairs.src_mask):
        after = translation.log_probs(pairs)
    assert torch.allclose(before, after, atol=1e-5)
    _, maps = translation.attention_maps(pairs)
    assert set(maps) == {"attention"}
    assert torch.allclose(maps["attention"].sum(dim=1), torch.ones(len(pairs)), atol=1e-5)
    assert maps["attention"][~pairs.src_mask].eq(0).all()


def test_a_transformer_is_read_per_layer_and_head_and_not_replaced():
    torch.manual_seed(0)
    model = TransformerSeq2Seq(
        12, 12, max_len=8, hidden_size=8, num_layers=2, num_heads=2, ffn_size=16
    )
    translation = Translation(model)
    pairs = pairs_of(translation_batch(), max_tokens=2)
    _, maps = translation.attention_maps(pairs)
    assert set(maps) == {"attention", "head0", "head1", "layer1", "layer2"}
    own = model(pairs.src_ids, pairs.src_mask, pairs.tgt_in, return_attention=True).attention
    rows = torch.arange(len(pairs))
    assert torch.allclose(maps["attention"], own[rows, pairs.step], atol=1e-6)
    assert translation.attention_layer is None
    with (
        pytest.raises(ValueError, match="no single attention layer"),
        translation.weights_replaced(lambda w, m: w, pairs.src_mask),
    ):
        pass
    columns, _ = explain_translation_batch(
        translation, pairs, SETTINGS, torch.Generator().manual_seed(0)
    )
    assert "permutation/median_change" not in columns
    assert {"erasure/attention", "kendall_tau/layer1/leave_one_out"} <= set(columns)
