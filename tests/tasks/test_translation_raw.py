"""Raw inputs for predict: empty, unknown-only and overlong sources get a defined answer, and the
translations come greedy (beam size 1) or as an n-best list."""

from functools import partial

import pytest
import torch
from translation_data import write_fra_eng

from attnexp.data.fra_eng import FraEngDataModule
from attnexp.data.translation_text import BOS_ID, EOS_ID, NEVER_EMITTED
from attnexp.models.seq2seq import Seq2Seq
from attnexp.modules.decoding import greedy_decode
from attnexp.modules.scorers import AdditiveScorer
from attnexp.predictors import predictor_for


@pytest.fixture(scope="module")
def data_and_model(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("raw")
    write_fra_eng(tmp / "data", num_pairs=300)
    dm = FraEngDataModule(
        data_dir=str(tmp / "data"),
        val_sources=20,
        test_sources=30,
        max_tokens=6,
        min_frequency=1,
        cache_dir=str(tmp / "cache"),
    )
    dm.setup("fit")
    torch.manual_seed(0)
    model = Seq2Seq(
        dm.model_kwargs["src_vocab_size"],
        dm.model_kwargs["tgt_vocab_size"],
        partial(AdditiveScorer),
        embed_dim=8,
        hidden_size=8,
    )
    return dm, model.eval()


def test_raw_sources_are_checked_and_noted(data_and_model):
    dm, _ = data_and_model
    predictor = predictor_for(dm)  # what predict reads raw inputs through
    assert "empty" in predictor.check_raw({"text": "  "})
    assert predictor.check_raw({"text": "I see the cat."}) is None
    assert predictor.raw_notes({"text": "I see the cat."}) == []
    assert "all 2 source tokens are unknown" in predictor.raw_notes({"text": "zorglub blorp"})[0]
    assert "1 of 3 source tokens unknown" in predictor.raw_notes({"text": "I zorglub."})[0]
    overlong = " ".join(["cat"] * 9) + "."
    assert predictor.check_raw({"text": overlong}) is None
    assert any("data.max_tokens=6" in n for n in predictor.raw_notes({"text": overlong}))
    limit = dm.model_kwargs["max_len"]
    too_long = predictor.check_raw({"text": "cat " * (limit + 1)})
    assert f"{limit + 1} source tokens" in too_long and f"the {limit} positions" in too_long


def test_n_best_translations_with_their_attention(data_and_model, tmp_path):
    dm, model = data_and_model
    predictor = predictor_for(dm)
    texts = ["I see the cat.", "zorglub blorp", "The big red dog sees the house!"]
    batch = predictor.encode_raw([{"text": t} for t in texts])
    answer = predictor.predict_batch(model, batch, beam_size=3, alpha=0.6, max_len=6, n_best=2)
    for fields in answer.fields:
        first, second = fields["n_best"]
        assert first["score"] >= second["score"] and fields["translation"] == first["translation"]
    views = predictor.prediction_attention(batch, answer.attention)
    for (sources, per_target), (targets, weights) in zip(views, answer.attention, strict=True):
        assert len(targets) <= 6 and targets[-1] == "[EOS]" and len(per_target) == len(targets)
        assert weights.shape == (len(targets), batch["src_ids"].shape[1])
        for weights_of_step in per_target.values():  # padded source positions are cut off
            assert len(weights_of_step) == len(sources)
            assert float(weights_of_step.sum()) == pytest.approx(1.0, abs=1e-5)
    assert views[1][0] == ["[UNK]", "[UNK]"]
    stems = [tmp_path / "ex0", None, None]
    files = predictor.prediction_figures(batch, answer.scores, answer.attention, views, stems)
    assert [f.name for f in files] == ["ex0.png", "ex0.html"]
    page = (tmp_path / "ex0.html").read_text(encoding="utf-8")
    assert views[0][0][1] in page and f"<b>0 {answer.attention[0][0][0]}</b>" in page


def test_beam_size_one_is_the_greedy_translation(data_and_model):
    dm, model = data_and_model
    predictor = predictor_for(dm)
    batch = predictor.encode_raw([{"text": "I see the cat."}, {"text": "He runs!"}])
    answer = predictor.predict_batch(model, batch, beam_size=1, alpha=0.0, max_len=6, n_best=1)
    greedy = greedy_decode(
        model, batch["src_ids"], batch["src_mask"], BOS_ID, EOS_ID, 6, NEVER_EMITTED
    )
    assert [f["translation"] for f in answer.fields] == [dm.decode_target(h.tokens) for h in greedy]
    assert all("n_best" not in f for f in answer.fields)
