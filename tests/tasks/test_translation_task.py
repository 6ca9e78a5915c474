"""Translation through the real CLI: every model and scorer trains a batch (compose path), the
record holds the data summary and sacrebleu's signatures, and `python -m attnexp model=seq2seq`
runs on the embedded sample."""

import json

import pytest
from cli_helpers import run_cli
from imdb_data import train_in_process
from translation_data import write_fra_eng, write_multi30k

TINY = (
    "data.val_sources=20",
    "data.test_sources=30",
    "data.min_frequency=1",
    "data.batch_size=16",
    "model.hidden_size=8",
    "logger=csv",
    "trainer.enable_progress_bar=false",
    "decode.beam_size=3",
    "decode.max_len=8",
)
VARIANTS = [
    ("seq2seq", "scorer=additive"),
    ("seq2seq", "scorer=bilinear"),
    ("seq2seq", "scorer=dot"),
    ("seq2seq", "scorer=scaled_dot"),
    ("seq2seq", "model.attention=none"),
    (
        "seq2seq",
        "model.cell=lstm model.bidirectional=true model.bridge=true model.input_feeding=true model.tie_embeddings=true model.embed_dim=8",
    ),
    ("transformer_seq2seq", "model.num_heads=2 model.ffn_size=16 model.norm=post"),
    (
        "transformer_seq2seq",
        "model.num_heads=2 model.ffn_size=16 data.tokenizer=bpe data.vocab_size=80",
    ),
]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("translation")
    write_fra_eng(root / "data", num_pairs=300)
    write_multi30k(root / "data")
    return root / "data"


@pytest.mark.parametrize("model, extra", VARIANTS)
def test_every_model_and_scorer_fast_dev_run(compose_cfg, tmp_path, data_dir, model, extra):
    cfg = compose_cfg(
        f"model={model}", *extra.split(), *TINY, "debug=fdr", f"paths.data_dir={data_dir}"
    )
    metrics = train_in_process(cfg, tmp_path / "run")
    assert 0.0 <= metrics["test/bleu"] <= 100.0 and metrics["test/ppl"] > 1.0
    assert {"test/bleu_greedy", "test/bleu_beam", "test/chrf", "test/bleu_lc"} <= set(metrics)
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert record["status"] == "completed" and record["data_source"] == "local"
    assert record["data_summary"]["test_sources_in_train"] == 0
    assert "nrefs:" in record["translation"]["signature_bleu"]
    assert (tmp_path / "run" / "tokenizer_src.json").is_file()


def test_d2l_nmt_tests_the_final_weights_on_its_probe_sentences(compose_cfg, tmp_path, data_dir):
    cfg = compose_cfg(
        "experiment=translation/d2l_nmt",
        *TINY,
        f"paths.data_dir={data_dir}",
        "data.train_head=150",
        "trainer.max_epochs=2",
        "trainer.check_val_every_n_epoch=1",
    )
    metrics = train_in_process(cfg, tmp_path / "run")
    assert {f"test/probe_bleu2_{i}" for i in range(4)} <= set(metrics)
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert [p["source"] for p in record["translation"]["probe_translations"]][0] == "go."
    assert record["data_summary"]["train_pairs"] == 150 and record.get("best_ckpt") is None


def test_nmt_fra_eng_keeps_the_best_checkpoint_by_val_bleu(compose_cfg, tmp_path, data_dir):
    cfg = compose_cfg(
        "experiment=translation/nmt_fra_eng",
        *TINY,
        f"paths.data_dir={data_dir}",
        "model.embed_dim=8",
        "trainer.max_epochs=2",
        "trainer.limit_train_batches=2",
    )
    metrics = train_in_process(cfg, tmp_path / "run")
    assert "val/bleu_best" in metrics and "val/bleu" in metrics
    assert {"test/ppl", "test/ppl_free", "test/loss_free"} <= set(metrics)
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert "-bleu" in record["best_ckpt"]


def test_multi30k_runs_in_the_configured_direction(compose_cfg, tmp_path, data_dir):
    cfg = compose_cfg(
        "experiment=translation/nmt_multi30k",
        "data.src=en",
        "data.tgt=fr",
        "model.hidden_size=8",
        "model.embed_dim=8",
        "debug=fdr",
        "logger=csv",
        "trainer.enable_progress_bar=false",
        "data.min_frequency=1",
        f"paths.data_dir={data_dir}",
    )
    train_in_process(cfg, tmp_path / "run")
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert record["data_summary"]["direction"] == "en->fr" and record["status"] == "completed"


def test_cli_trains_seq2seq_on_the_embedded_sample(tmp_path):
    """A bare run: the held-out sizes are the full data's defaults, capped on the sample."""
    result = run_cli(
        tmp_path,
        "model=seq2seq",
        "model.hidden_size=16",
        "model.embed_dim=16",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=3",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "trainer.enable_progress_bar=false",
        "decode.beam_size=2",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (record_path,) = (tmp_path / "outputs").rglob("metrics.json")
    record = json.loads(record_path.read_text())
    assert record["data_source"] == "sample" and record["status"] == "completed"
    assert any("sample" in w for w in record["warnings"])
    assert any("data.test_sources=2000" in w for w in record["warnings"])
    assert "test/bleu" in record["metrics"] and "test/bleu" in result.stdout
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(record_path.parent / "tb"))
    events.Reload()
    assert "attention/val_examples" in events.Tags()["images"]
    # beside the heatmaps, the same probe sentences' translations as text, each validation
    (tag,) = [t for t in events.Tags()["tensors"] if t.startswith("translations/val_examples")]
    (text,) = [e.tensor_proto.string_val[0].decode() for e in events.Tensors(tag)]
    rows = text.splitlines()
    assert rows[0] == "| source | reference | translation |" and len(rows) > 2
