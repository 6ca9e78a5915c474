"""`python -m attnexp.predict` on a tiny trained run: labels, figures, edge-case inputs."""

import json

import pytest
from imdb_data import TINY_MODEL, train_in_process, write_imdb

from attnexp.predict import main, split_args


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    tmp = tmp_path_factory.mktemp("predict")
    write_imdb(tmp / "data")
    GlobalHydra.instance().clear()
    with initialize_config_module("attnexp.conf", version_base="1.3"):
        cfg = compose(
            "train",
            return_hydra_config=True,
            overrides=[
                f"paths.log_dir={tmp}/outputs",
                f"paths.data_dir={tmp}/data",
                f"data.cache_dir={tmp}/cache",
                "model=lstm_mhsa",
                "model.heads=2",
                *TINY_MODEL,
                "trainer.max_epochs=1",
                "trainer.limit_train_batches=2",
                "trainer.limit_val_batches=1",
                "trainer.limit_test_batches=1",
            ],
        )
    GlobalHydra.instance().clear()
    train_in_process(cfg, tmp / "run")
    return tmp / "run"


def predict(capsys, *args):
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_text_argument_is_taken_verbatim():
    raw, overrides = split_args(["text=it's great, (really) = yes", "device=cpu"], ("text",))
    assert raw == {"text": "it's great, (really) = yes"} and overrides == ["device=cpu"]


def test_predict_one_text_writes_png_and_html(run_dir, capsys, tmp_path):
    rc, out, _ = predict(
        capsys,
        f"ckpt_path={next((run_dir / 'checkpoints').glob('epoch*.ckpt'))}",
        "text=this great science fiction film is really awesome, isn't it?",
        f"out_dir={tmp_path}",
    )
    assert rc == 0
    assert out.split()[0] in ("positive", "negative") and 0.5 <= float(out.split()[1]) <= 1.0
    assert (tmp_path / "example0000.png").stat().st_size > 0
    html = (tmp_path / "example0000.html").read_text()
    assert "<html>" in html and "great" in html and "head1" in html
    (row,) = [
        json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()
    ]
    assert abs(sum(row["probabilities"]) - 1) < 1e-3


def test_edge_cases_from_a_texts_file(run_dir, capsys, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text(
        "\n".join(["a great film", "", "   \t ", "zzqx blorf", "great " * 500, "<br /><br />"])
        + "\n"
    )
    rc, out, _ = predict(
        capsys,
        f"ckpt_path={run_dir}",
        f"texts_file={texts}",
        f"out_dir={tmp_path / 'out'}",
        "max_figures=1",
    )
    assert rc == 0
    rows = [
        json.loads(line)
        for line in (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 6
    assert rows[0]["label"] in ("positive", "negative") and rows[0]["files"]
    assert rows[1]["problem"] and rows[2]["problem"] and rows[5]["problem"]  # nothing to classify
    assert rows[3]["label"] and any("unknown" in n for n in rows[3]["notes"])
    assert rows[4]["label"] and any("first 32 of 500" in n for n in rows[4]["notes"])
    assert not rows[4]["files"]  # max_figures=1
    assert out.count("no prediction") == 3


def test_clear_errors_without_traceback(run_dir, capsys, tmp_path):
    rc, _, err = predict(capsys, f"ckpt_path={run_dir}")
    assert rc == 2 and "text=..." in err and "Traceback" not in err
    rc, _, err = predict(capsys, f"ckpt_path={tmp_path / 'missing.ckpt'}", "text=hi")
    assert rc == 2 and "does not exist" in err
    rc, _, err = predict(capsys, f"ckpt_path={run_dir}", "text=hi", "no_such_key=1")
    assert rc == 2 and "no_such_key" in err
