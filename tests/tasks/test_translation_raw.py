"""Raw inputs for predict: empty, unknown-only and overlong sources get a defined answer."""

from functools import partial

import torch
from translation_data import write_fra_eng

from attnexp.data.fra_eng import FraEngDataModule
from attnexp.models.seq2seq import Seq2Seq
from attnexp.modules.scorers import AdditiveScorer
from attnexp.predictors import predictor_for
from attnexp.tasks.translation import TranslationTask


def test_raw_sources_translate_with_notes(tmp_path):
    write_fra_eng(tmp_path / "data", num_pairs=300)
    dm = FraEngDataModule(
        data_dir=str(tmp_path / "data"),
        val_sources=20,
        test_sources=30,
        max_tokens=6,
        min_frequency=1,
        cache_dir=str(tmp_path / "cache"),
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
    task = TranslationTask(model, dm.num_classes, torch.optim.Adam, beam_size=3, max_len=6)
    task.datamodule = dm
    predictor = predictor_for(dm)  # what predict reads raw inputs through
    assert "empty" in predictor.check_raw({"text": "  "})
    assert predictor.check_raw({"text": "I see the cat."}) is None
    assert predictor.raw_notes({"text": "I see the cat."}) == []
    assert "2 of 2 source tokens unknown" in predictor.raw_notes({"text": "zorglub blorp"})[0]
    overlong = " ".join(["cat"] * 9) + "."
    assert any("data.max_tokens=6" in n for n in predictor.raw_notes({"text": overlong}))
    results = task.translate_texts(["I see the cat.", "zorglub blorp", overlong], n_best=2)
    for n_best in results:
        assert len(n_best) == 2 and n_best[0]["score"] >= n_best[1]["score"]
        best = n_best[0]
        assert len(best["tokens"]) <= 5 and isinstance(best["text"], str)
        assert best["attention"].shape[0] == len(best["tokens"]) + 1
