"""predict on translation runs: the translation (greedy, beam, n-best), the target x source
heatmap and HTML page, predictions.jsonl, the edge cases, and a folder of runs compared."""

import json

import pytest
from cli_helpers import compose_train
from imdb_data import train_in_process
from omegaconf import OmegaConf
from translation_data import write_fra_eng

from attnexp.cli.predict import main
from attnexp.errors import ConfigError
from attnexp.runner.predict.inputs import decode_settings


def train_translation_run(tmp, run_dir, *overrides):
    cfg = compose_train(
        tmp,
        "model=seq2seq",
        "data.val_sources=20",
        "data.test_sources=30",
        "data.min_frequency=1",
        "data.batch_size=16",
        "model.embed_dim=8",
        "model.hidden_size=8",
        "logger=csv",
        "trainer.enable_progress_bar=false",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=2",
        "decode.beam_size=2",
        "decode.max_len=8",
        *overrides,
    )
    train_in_process(cfg, run_dir)
    return run_dir


@pytest.fixture(scope="module")
def runs_folder(tmp_path_factory):
    """Two translation runs as a sweep leaves them: with attention (additive), and without."""
    tmp = tmp_path_factory.mktemp("predict_translation")
    write_fra_eng(tmp / "data", num_pairs=300)
    train_translation_run(tmp, tmp / "runs" / "0_additive", "scorer=additive")
    train_translation_run(tmp, tmp / "runs" / "1_none", "model.attention=none")
    return tmp / "runs"


def predict(capsys, *args):
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def rows_of(out_dir):
    return [json.loads(line) for line in (out_dir / "predictions.jsonl").read_text().splitlines()]


def test_a_translation_with_its_n_best_heatmap_and_page(runs_folder, capsys, tmp_path):
    rc, out, _ = predict(
        capsys,
        f"ckpt_path={runs_folder / '0_additive'}",
        "text=I see the cat.",
        "decode.beam_size=3",
        "decode.n_best=2",
        f"out_dir={tmp_path}",
    )
    assert rc == 0
    (row,) = rows_of(tmp_path)
    assert out.startswith(f"'I see the cat.' -> {row['translation']!r}")
    assert [h["translation"] for h in row["n_best"]][0] == row["translation"]
    assert row["n_best"][0]["score"] >= row["n_best"][1]["score"]
    assert f"2. {row['n_best'][1]['translation']!r}" in out
    assert row["tokens"] == ["I", "see", "the", "cat", "."]  # as read, cased, without markers
    targets = list(row["attention"])  # one row of source weights per target token, EOS last
    assert targets[-1].endswith("[EOS]") and len(targets) <= 8
    for weights in row["attention"].values():
        assert len(weights) == 5 and sum(weights) == pytest.approx(1, abs=1e-4)
    assert (tmp_path / "example0000.png").stat().st_size > 0
    page = (tmp_path / "example0000.html").read_text(encoding="utf-8")
    assert f"<b>{targets[0]}</b>" in page and ">cat</span>" in page


def test_empty_unknown_only_and_overlong_sources(runs_folder, capsys, tmp_path):
    texts = tmp_path / "texts.txt"
    overlong, too_long = "the cat " * 8, "cat " * 100
    texts.write_text(f"\nzorglub blorp\n{overlong}\n{too_long}\n", encoding="utf-8")
    out_dir = tmp_path / "out"
    rc, out, _ = predict(
        capsys,
        f"ckpt_path={runs_folder / '0_additive'}",
        f"texts_file={texts}",
        f"out_dir={out_dir}",
    )
    assert rc == 0  # some sources were translated
    empty, unknown, long, refused = rows_of(out_dir)
    assert empty["problem"] == "empty text: nothing to translate" and "translation" not in empty
    assert unknown["problem"] is None and isinstance(unknown["translation"], str)
    assert "all 2 source tokens are unknown" in unknown["notes"][0]
    assert long["problem"] is None and "data.max_tokens=10" in long["notes"][0]
    assert "100 source tokens, more than the 64 positions" in refused["problem"]
    assert "no prediction: 100 source tokens" in out


def test_only_empty_input_exits_2(runs_folder, capsys, tmp_path):
    rc, _, err = predict(
        capsys, f"ckpt_path={runs_folder / '0_additive'}", "text= ", f"out_dir={tmp_path}"
    )
    assert rc == 2 and "no input could be classified or translated" in err


def test_decode_settings_name_the_key(runs_folder, capsys, tmp_path):
    rc, _, err = predict(
        capsys,
        f"ckpt_path={runs_folder / '0_additive'}",
        "text=hi",
        "decode.n_best=0",
        f"out_dir={tmp_path}",
    )
    assert rc == 2 and "decode.n_best=0 must be a whole number >= 1" in err
    asked = OmegaConf.create({"decode": {"beam_size": 4, "n_best": 1}})
    with pytest.raises(ConfigError, match=r"decode.beam_size=4.*model=lstm_attn.*drop decode"):
        decode_settings(asked, OmegaConf.create({"model": {}}), "lstm_attn")
    run_cfg = OmegaConf.create({"decode": {"beam_size": 5, "alpha": 0.6, "max_len": 20}})
    assert decode_settings(asked, run_cfg, "seq2seq") == {
        "beam_size": 4,
        "alpha": 0.6,
        "max_len": 20,
        "n_best": 1,
    }


def test_a_folder_of_translation_runs_is_compared(runs_folder, capsys, tmp_path):
    rc, out, _ = predict(
        capsys, f"ckpt_path={runs_folder}", "text=He sees the red dog!", f"out_dir={tmp_path}"
    )
    assert rc == 0 and [line for line in out.splitlines() if line.startswith("run ")] == [
        "run 0_additive:",
        "run 1_none:",
    ]
    with_attention, without = rows_of(tmp_path)
    assert "attention" in with_attention and "attention" not in without
    assert not (tmp_path / "1_none").exists()  # no attention, no figures
    page = (tmp_path / "compare.html").read_text(encoding="utf-8")
    for run, row in (("0_additive", with_attention), ("1_none", without)):
        bleu = json.loads((runs_folder / run / "metrics.json").read_text())["metrics"]["test/bleu"]
        answer = f"{row['translation']} (score {row['score']:.4f})"
        assert f"<b>{run}</b> (test/bleu {bleu:.4f}): {answer}" in page


def test_predict_reads_no_split(runs_folder, capsys, tmp_path):
    """The tokenizers and the sizes the model was built with come from the run dir: predict
    works where the training data is gone (here: a data folder that does not exist)."""
    run = runs_folder / "0_additive"
    assert json.loads((run / "translation_sizes.json").read_text())["max_len"] >= 64
    rc, _, err = predict(
        capsys,
        f"ckpt_path={run}",
        "text=I see the cat.",
        f'overrides=["paths.data_dir={tmp_path / "gone"}","data.source=local"]',
        f"out_dir={tmp_path / 'out'}",
    )
    assert rc == 0, err
