"""`python -m attnexp.predict` on a tiny trained run: labels, figures, edge-case inputs; and on a
folder of runs, compared."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from analysis_helpers import load_analysis
from cli_helpers import compose_train, run_counting_imports
from imdb_data import TINY_MODEL, train_in_process, write_imdb
from lcqmc_data import write_lcqmc
from omegaconf import OmegaConf

from attnexp.cli.predict import main, split_args
from attnexp.predictors import TokenPredictor
from attnexp.runner.build import build
from attnexp.runner.load import load_run, load_run_config, longer_than_trained

SHORT_TRAINING = (
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "trainer.val_check_interval=1.0",  # the text models' recipes check every 10 steps or 1/4 epoch
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("predict")
    write_imdb(tmp / "data")
    cfg = compose_train(tmp, "model=lstm_mhsa", "model.num_heads=2", *TINY_MODEL, *SHORT_TRAINING)
    train_in_process(cfg, tmp / "run")
    return tmp / "run"


def train_pair_run(tmp, *model) -> Path:
    """A tiny LCQMC run (`model`: the model's overrides) trained in `tmp/run`."""
    write_lcqmc(tmp / "data", {"dev": 40, "test": 8})
    cfg = compose_train(
        tmp,
        *model,
        "model.hidden_size=16",
        "model.ffn_size=32",
        "data.train_split=dev",
        "data.max_seq_len=16",
        "data.batch_size=8",
        "logger=csv",
        "trainer.enable_progress_bar=false",
        "trainer.accelerator=cpu",
        *SHORT_TRAINING,
    )
    train_in_process(cfg, tmp / "run")
    return tmp / "run"


@pytest.fixture(scope="module")
def pair_run_dir(tmp_path_factory):
    return train_pair_run(
        tmp_path_factory.mktemp("predict_pairs"), "model=transformer", "model.num_heads=2"
    )


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
    # per head, the weight each token receives from the real queries: a distribution over them
    assert row["tokens"][1:3] == ["great", "[UNK]"] and "head1" in row["attention"]
    for weights in row["attention"].values():
        assert len(weights) == len(row["tokens"]) and sum(weights) == pytest.approx(1, abs=1e-4)


@pytest.fixture(scope="module", params=["lstm_attn", "lstm_mean"])
def pooled_run_dir(request, tmp_path_factory):
    """A run of the design card's model (attention pooling: one weight per token), or of the
    baseline without attention."""
    tmp = tmp_path_factory.mktemp(f"predict_{request.param}")
    write_imdb(tmp / "data")
    scorer = ["scorer=dot"] if request.param == "lstm_attn" else []
    cfg = compose_train(tmp, f"model={request.param}", *scorer, *TINY_MODEL, *SHORT_TRAINING)
    train_in_process(cfg, tmp / "run")
    return request.param, tmp / "run"


def test_predict_with_attention_pooling_or_none(pooled_run_dir, capsys, tmp_path):
    model, pooled_run_dir = pooled_run_dir
    rc, out, _ = predict(
        capsys,
        f"ckpt_path={pooled_run_dir}",
        "text=this great science fiction film is really awesome",
        f"out_dir={tmp_path}",
    )
    assert rc == 0 and out.split()[0] in ("positive", "negative")
    (row,) = [
        json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()
    ]
    if model == "lstm_mean":  # nothing to draw: no figure files, no error
        assert row["files"] == [] and not list(tmp_path.glob("example*"))
        assert "attention" not in row and "tokens" not in row
        return
    assert list(row["attention"]) == ["pooling"] and "film" in row["tokens"]
    assert len(row["attention"]["pooling"]) == len(row["tokens"])
    assert sum(row["attention"]["pooling"]) == pytest.approx(1, abs=1e-4)
    assert sorted(row["files"]) == [str(tmp_path / f"example0000.{ext}") for ext in ("html", "png")]
    html = (tmp_path / "example0000.html").read_text()
    assert "pooling" in html and "head0" not in html  # one view: the pooling weights
    assert all(word in html for word in ("great", "film", "[UNK]"))  # "science": not in training


def test_edge_cases_from_a_texts_file(run_dir, capsys, tmp_path):
    texts = tmp_path / "texts.txt"
    lines = ["a great film", "", "   \t ", "zzqx blorf", "great " * 500, "<br /><br />"]
    texts.write_text("\n".join([*lines, "a great\tfilm"]) + "\n")
    rc, out, _ = predict(
        capsys,
        f"ckpt_path={run_dir}",
        f"texts_file={texts}",
        f"out_dir={tmp_path / 'out'}",
        "max_figures=4",
    )
    assert rc == 0
    rows = [
        json.loads(line)
        for line in (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 7
    assert rows[0]["label"] in ("positive", "negative")
    for i in (0, 3):  # one batch: each row names its own figures, not its batch's
        stem = tmp_path / "out" / f"example{i:04d}"
        assert sorted(rows[i]["files"]) == [f"{stem}.html", f"{stem}.png"]
    assert rows[1]["problem"] and rows[2]["problem"] and rows[5]["problem"]  # nothing to classify
    assert rows[3]["label"] and any("unknown" in n for n in rows[3]["notes"])
    assert rows[4]["label"] and any("first 32 of 500" in n for n in rows[4]["notes"])
    assert not rows[4]["files"] and not rows[6]["files"]  # max_figures=4: rows 0-3 only
    # a model of one text reads a tab as part of the text, not as a field separator
    assert rows[6]["input"] == {"text": "a great\tfilm"} and rows[6]["label"]
    assert out.count("no prediction") == 3


def test_clear_errors_without_traceback(run_dir, capsys, tmp_path):
    rc, _, err = predict(capsys, f"ckpt_path={run_dir}")
    assert rc == 2 and "text=..." in err and "Traceback" not in err
    rc, _, err = predict(capsys, f"ckpt_path={tmp_path / 'missing.ckpt'}", "text=hi")
    assert rc == 2 and "does not exist" in err
    rc, _, err = predict(capsys, f"ckpt_path={run_dir}", "text=hi", "no_such_key=1")
    assert rc == 2 and "no_such_key" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["text=hi"], "ckpt_path is missing"),
        (
            ["RUN", "text=hi", 'overrides=["data.max_seq_len=0"]'],
            r"data.max_seq_len=0 must be.*\(predict takes run settings as 'overrides=",
        ),
        (["RUN", "text=hi", "batch_size=0"], "batch_size=0 must be a whole number >= 1"),
        (["RUN", "text=hi", "max_figures=-1"], "max_figures=-1 must be a whole number >= 1"),
        (["RUN", "text=hi", "figures=maybe"], r"figures='maybe' must be true or false \(set"),
        (["RUN", "text=hi", "attention=no"], r"attention='no' must be true or false"),
        (["RUN", "text=hi", "device=cude"], "device=cude is not a torch device"),
        (["RUN", "text=hi", "device=meta"], r"device=meta: predict runs on cpu or cuda \(set"),
        (["RUN", "text=hi", "device=mps"], r"device=mps: predict runs on cpu or cuda"),
        (["RUN", "text_a=hi", "text_b=ho"], "text_a=, text_b= do not apply: model=lstm_mhsa"),
        (["RUN", "texts_file=TMP"], "texts_file=.* is a directory"),
        (["RUN", "texts_file=TMP/latin1.txt"], "latin1.txt is not UTF-8 text"),
        (["RUN", "texts_file=TMP/empty.txt"], r"texts_file=.*empty.txt holds no lines to predict"),
        (
            ["RUN", "text=hi", "data.max_seq_len=8"],
            r"data.max_seq_len=8 is not a setting of predict .*'overrides=\[\"data.max_seq_len=8\"\]'",
        ),
        (
            ["RUN", "text=hi", "+data.max_seq_len=8"],
            r"is not a setting of predict .*'overrides=\[\"data.max_seq_len=8\"\]'",
        ),
        (
            ["RUN", "text=hi", "overrides=data.max_seq_len=8"],
            r"overrides takes a list, write 'overrides=\[\"data.max_seq_len=8\"\]'",
        ),
        (
            ["RUN/metrics.json", "text=hi"],
            r"metrics.json is not a Lightning checkpoint \(.ckpt\) file .*: give ckpt_path=<.*/>$",
        ),
    ],
)
def test_more_clear_errors(run_dir, capsys, tmp_path, args, message):
    (tmp_path / "latin1.txt").write_bytes("a great caf\xe9 film\n".encode("latin-1"))
    (tmp_path / "empty.txt").write_bytes(b"")
    args = [a.replace("TMP", str(tmp_path)) for a in args]
    args = [f"ckpt_path={run_dir}{a[3:]}" if a.startswith("RUN") else a for a in args]
    rc, _, err = predict(capsys, *args, f"out_dir={tmp_path / 'out'}")
    assert rc == 2 and "Traceback" not in err
    assert err.startswith("error: ") and re.search(message, err), err
    assert err.count("\n") == 1  # one line


def test_a_folder_inside_the_run_stands_for_the_run(run_dir, capsys, tmp_path):
    rc, out, _ = predict(
        capsys, f"ckpt_path={run_dir / 'checkpoints'}", "text=a great film", f"out_dir={tmp_path}"
    )
    assert rc == 0 and out.split()[0] in ("positive", "negative")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_without_cuda(run_dir, capsys, tmp_path):
    rc, _, err = predict(
        capsys, f"ckpt_path={run_dir}", "text=hi", "device=cuda", f"out_dir={tmp_path}"
    )
    assert rc == 2 and "device=cuda" in err and "device=cpu" in err


@pytest.mark.parametrize("text", ["", "   "])
def test_a_single_text_that_cannot_be_classified_exits_2(run_dir, capsys, tmp_path, text):
    rc, out, err = predict(capsys, f"ckpt_path={run_dir}", f"text={text}", f"out_dir={tmp_path}")
    assert rc == 2 and "no prediction: empty text" in out and err.startswith("error: ")


def test_out_dir_is_never_reused_nor_inside_a_run(run_dir, capsys, tmp_path):
    out = tmp_path / "out"
    assert predict(capsys, f"ckpt_path={run_dir}", "text=a great film", f"out_dir={out}")[0] == 0
    before = (out / "predictions.jsonl").read_text()
    rc, _, err = predict(capsys, f"ckpt_path={run_dir}", "text=awful", f"out_dir={out}")
    assert rc == 2 and f"out_dir={out} already holds predict outputs" in err
    assert (out / "predictions.jsonl").read_text() == before
    for inside in (run_dir, run_dir / "checkpoints", run_dir / "preds"):
        rc, _, err = predict(capsys, f"ckpt_path={run_dir}", "text=hi", f"out_dir={inside}")
        assert rc == 2 and f"is in the run {run_dir}" in err and "out_dir=" in err
    assert not (run_dir / "preds").exists() and not (run_dir / "predictions.jsonl").exists()
    (tmp_path / "afile").write_text("x")  # was a FileExistsError traceback, after the model loaded
    rc, _, err = predict(capsys, f"ckpt_path={run_dir}", "text=hi", f"out_dir={tmp_path}/afile")
    assert rc == 2 and "afile is a file, so predictions cannot be written there" in err
    for _ in range(2):  # the default out_dir: a new folder each time
        rc, *_ = predict(capsys, f"ckpt_path={run_dir}", "text=hi", f"paths.log_dir={tmp_path}")
        assert rc == 0
    assert len(list((tmp_path / "predictions").glob("*/predictions.jsonl"))) == 2


@pytest.mark.parametrize("earlier", ["predictions.jsonl", "example0000.png", "compare.html"])
def test_out_dir_holding_either_kind_of_output_is_refused(capsys, tmp_path, earlier):
    """Figures are drawn batch by batch and predictions.jsonl written last: an interrupted
    prediction leaves figures alone, one with figures=false (or no attention) the file alone."""
    out = tmp_path / "out"
    out.mkdir()
    (out / earlier).write_text("earlier")
    rc, _, err = predict(capsys, f"ckpt_path={tmp_path}", "text=hi", f"out_dir={out}")
    assert rc == 2 and f"out_dir={out} already holds predict outputs ({earlier})" in err
    assert [p.name for p in out.iterdir()] == [earlier] and (out / earlier).read_text() == "earlier"


def test_text_then_texts_file_without_figures(run_dir, capsys, tmp_path):
    """text= and texts_file= together: the argument's example first, then the file's lines;
    figures=false draws nothing."""
    texts = tmp_path / "texts.txt"
    texts.write_text("an awful film\n")
    out = tmp_path / "out"
    args = ["text=a great film", f"texts_file={texts}", f"out_dir={out}", "figures=false"]
    rc, stdout, _ = predict(capsys, f"ckpt_path={run_dir}", *args)
    assert rc == 0 and "attention:" not in stdout
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["input"]["text"] for r in rows] == ["a great film", "an awful film"]
    assert [r["files"] for r in rows] == [[], []]
    assert [p.name for p in out.iterdir()] == ["predictions.jsonl"]
    assert [r["tokens"] for r in rows] == [["a", "great", "film"], ["[UNK]", "awful", "film"]]
    assert all(len(w) == 3 for r in rows for w in r["attention"].values())  # drawn or not
    # attention=false: the same predictions, without the tokens and weights
    args = ["text=a great film", f"texts_file={texts}", f"out_dir={tmp_path / 'lean'}"]
    assert predict(capsys, f"ckpt_path={run_dir}", *args, "attention=false")[0] == 0
    lean = [json.loads(line) for line in (tmp_path / "lean" / "predictions.jsonl").open()]
    assert [r["probabilities"] for r in lean] == [r["probabilities"] for r in rows]
    assert not any("tokens" in r or "attention" in r for r in lean)
    assert (tmp_path / "lean" / "example0000.html").is_file()  # figures are still drawn


def test_texts_file_lines_bom_and_crlf(run_dir, capsys, tmp_path):
    texts = tmp_path / "texts.txt"
    lines = ["a great film", "", "awful\x0cfilm", "dull\u2028plot\x85x", "a great film"]
    texts.write_bytes(("\ufeff" + "\r\n".join(lines) + "\r\n").encode("utf-8"))
    rc, out, _ = predict(
        capsys, f"ckpt_path={run_dir}", f"texts_file={texts}", f"out_dir={tmp_path / 'o'}"
    )
    assert rc == 0 and out.count("no prediction") == 1
    rows = [
        json.loads(r) for r in (tmp_path / "o" / "predictions.jsonl").read_text().split("\n")[:-1]
    ]
    assert [r["input"]["text"] for r in rows] == lines
    assert rows[0]["probabilities"] == rows[4]["probabilities"]  # BOM dropped: the same text


def test_bag_run_is_refused_before_loading_data(compose_cfg, tmp_path, capsys, monkeypatch):
    from attnexp.data.bag_mnist import BagMNISTDataModule

    cfg = compose_cfg("model=bag_attn")
    run = tmp_path / "bag_run"
    (run / ".hydra").mkdir(parents=True)
    OmegaConf.save(
        OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), run / ".hydra" / "config.yaml"
    )
    choices = {"hydra": {"runtime": {"choices": dict(cfg.hydra.runtime.choices)}}}
    OmegaConf.save(OmegaConf.create(choices), run / ".hydra" / "hydra.yaml")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")

    def no_loading(*args, **kwargs):
        raise AssertionError("predict built the bag DataModule")

    monkeypatch.setattr(BagMNISTDataModule, "__init__", no_loading)
    rc, _, err = predict(capsys, f"ckpt_path={run}", "text=hi", f"out_dir={tmp_path / 'out'}")
    assert rc == 2 and "model=bag_attn" in err and "text models" in err


def test_pair_file_blank_lines_figures_and_html(pair_run_dir, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pairs = tmp_path / "pairs.txt"
    pairs.write_text(
        "电脑怎么录像\t如何录视频\n\n手机充电\t\n苹果好吃吗\t哪里买苹果\n", encoding="utf-8"
    )
    rc, out, _ = predict(
        capsys, f"ckpt_path={pair_run_dir}", f"texts_file={pairs}", "out_dir=out", "max_figures=1"
    )
    assert rc == 0 and out.count("no prediction") == 2
    rows = [
        json.loads(r) for r in (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()
    ]
    assert [bool(r["problem"]) for r in rows] == [False, True, True, False]
    assert "text_a and text_b are empty" in rows[1]["problem"]
    assert ["attention" in r for r in rows] == [True, False, False, True]  # past max_figures too
    tokens = rows[3]["tokens"]
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2 and "苹" in tokens
    assert "layer 1 head 1" in rows[3]["attention"]
    assert all(len(w) == len(tokens) for w in rows[3]["attention"].values())
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "example0000.html",
        "example0000.png",
        "predictions.jsonl",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "pairs.txt"]  # no None.png


@pytest.mark.parametrize("line", ["电脑怎么录像", "电脑\t怎么\t录像"])
def test_a_pair_file_line_without_two_fields_is_said(pair_run_dir, capsys, tmp_path, line):
    """A line of a pair model's texts_file holds text_a<TAB>text_b: one with another number of
    fields is said by line number, not a zip() traceback."""
    pairs = tmp_path / "pairs.txt"
    pairs.write_text(f"苹果好吃吗\t哪里买苹果\n{line}\n", encoding="utf-8")
    rc, _, err = predict(
        capsys, f"ckpt_path={pair_run_dir}", f"texts_file={pairs}", f"out_dir={tmp_path / 'o'}"
    )
    fields = line.count("\t") + 1
    assert rc == 2 and "Traceback" not in err
    assert err == (
        f"error: {pairs}:2: {fields} tab-separated field(s), expected 2 (text_a, text_b)\n"
    )
    assert not (tmp_path / "o").exists()


def test_a_pair_model_given_one_text_says_which_is_missing(pair_run_dir, capsys, tmp_path):
    """text_a= alone is a command to fix, not a traceback."""
    args = [f"ckpt_path={pair_run_dir}", "text_a=电脑怎么录像", f"out_dir={tmp_path}"]
    rc, _, err = predict(capsys, *args)
    assert rc == 2 and "Traceback" not in err
    assert err.startswith("error: missing text_b=... (this model reads text_a, text_b)")


def test_a_longer_max_seq_len_than_trained_is_said(pair_run_dir, capsys, tmp_path, caplog):
    """Sinusoidal positions load at any length, so this ran silently on untrained positions."""
    args = [f"ckpt_path={pair_run_dir}", "text_a=电脑怎么录像", "text_b=如何录视频"]
    rc, _, _ = predict(capsys, *args, f"out_dir={tmp_path / 'same'}")
    assert rc == 0 and "never saw" not in caplog.text
    longer = 'overrides=["data.max_seq_len=64"]'
    rc, _, _ = predict(capsys, *args, longer, f"out_dir={tmp_path / 'longer'}")
    assert rc == 0
    assert "data.max_seq_len=64 is above the 16 the run was trained with" in caplog.text
    assert "positions the model never saw in training" in caplog.text
    # evaluate keeps the note in its record, as it does the data notes
    run_cfg = load_run_config(pair_run_dir, ["data.max_seq_len=64"])
    assert longer_than_trained(pair_run_dir, run_cfg).startswith("data.max_seq_len=64 is above")
    assert longer_than_trained(pair_run_dir, load_run_config(pair_run_dir)) is None


def test_help_and_hydra_flags(capsys):
    """predict parses its own command line: --help shows its settings, and Hydra's flags, which
    ended in Hydra's lexer error (LexerNoViableAltException: --help), are refused by name."""
    rc, out, _ = predict(capsys, "--help")
    assert rc == 0 and "texts_file:" in out and "ckpt_path=<ckpt, run dir or runs>" in out
    rc, _, err = predict(capsys, "ckpt_path=x", "--cfg", "job")
    assert rc == 2 and "takes key=value arguments only, not --cfg" in err


@pytest.fixture(scope="module")
def runs_folder(tmp_path_factory, run_dir):
    """A folder of runs, as a sweep leaves them: attention pooling, mean pooling (no attention)
    and a copy of the MHSA run (two heads)."""
    tmp = tmp_path_factory.mktemp("predict_runs")
    write_imdb(tmp / "data")
    for name, model in [
        ("0_dot", ["model=lstm_attn", "scorer=dot"]),
        ("1_mean", ["model=lstm_mean"]),
    ]:
        cfg = compose_train(tmp, *model, *TINY_MODEL, *SHORT_TRAINING)
        train_in_process(cfg, tmp / "runs" / name)
    shutil.copytree(run_dir, tmp / "runs" / "2_mhsa")
    return tmp / "runs"


def test_a_folder_of_runs_is_compared_run_by_run(runs_folder, capsys, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("a great film\n\nan awful film\n")
    out = tmp_path / "out"
    rc, stdout, _ = predict(
        capsys, f"ckpt_path={runs_folder}", f"texts_file={texts}", f"out_dir={out}"
    )
    assert rc == 0
    headers = [line for line in stdout.splitlines() if line.startswith("run ")]
    assert headers == ["run 0_dot:", "run 1_mean:", "run 2_mhsa:"]
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [(r["run"], r["input"]["text"]) for r in rows] == [
        (run, text)
        for run in ("0_dot", "1_mean", "2_mhsa")
        for text in ("a great film", "", "an awful film")
    ]
    by_run = {run: [r for r in rows if r["run"] == run] for run in ("0_dot", "1_mean", "2_mhsa")}
    assert list(by_run["0_dot"][0]["attention"]) == ["pooling"]
    assert "attention" not in by_run["1_mean"][0]
    assert list(by_run["2_mhsa"][2]["attention"]) == ["head0", "head1"]
    assert by_run["0_dot"][1]["problem"] == "empty text: nothing to classify"
    # each run's figures in a folder of its own; the runs themselves are left as they were
    assert sorted(p.name for p in (out / "0_dot").iterdir()) == [
        "example0000.html",
        "example0000.png",
        "example0002.html",
        "example0002.png",
    ]
    assert not (out / "1_mean").exists()  # no attention, no figures
    assert not list(runs_folder.glob("*/example*")) and not list(runs_folder.glob("*/pred*"))
    page = (out / "compare.html").read_text()
    for run in ("0_dot", "1_mean", "2_mhsa"):  # beside its name, each run's own test accuracy
        acc = json.loads((runs_folder / run / "metrics.json").read_text())["metrics"]["test/acc"]
        answer = f"{by_run[run][0]['label']} {by_run[run][0]['probability']:.4f}"
        assert f"<b>{run}</b> (test/acc {acc:.4f}): {answer}" in page
    mean = by_run["1_mean"][0]
    assert f"{mean['label']} {mean['probability']:.4f} (no attention)</p>" in page
    assert page.count("<b>head1</b>") == 2 and page.count("no prediction (empty text") == 3
    weight = by_run["0_dot"][0]["attention"]["pooling"][1]  # "great", as the JSON has it
    assert f"title='{weight:.4f}'>great</span>" in page


def test_a_comparison_leaves_out_runs_that_did_not_complete(runs_folder, capsys, caplog, tmp_path):
    folder = tmp_path / "runs"
    shutil.copytree(runs_folder / "0_dot", folder / "a")
    shutil.copytree(runs_folder / "0_dot", folder / "b")
    record = json.loads((folder / "b" / "metrics.json").read_text())
    (folder / "b" / "metrics.json").write_text(json.dumps({**record, "status": "failed"}))
    rc, stdout, err = predict(
        capsys,
        f"ckpt_path={folder}",
        "text=a great film",
        f"out_dir={tmp_path / 'out'}",
        "figures=false",
    )
    assert rc == 0 and "run a:" in stdout and "run b" not in stdout
    assert "b: left out of the comparison (status failed)" in caplog.messages
    assert not (tmp_path / "out" / "compare.html").exists()  # figures=false draws no page either
    (folder / "a" / "metrics.json").write_text(json.dumps({**record, "status": "failed"}))
    rc, _, err = predict(capsys, f"ckpt_path={folder}", "text=hi", f"out_dir={tmp_path / 'o2'}")
    assert rc == 2 and f"ckpt_path={folder}: none of its 2 run(s) completed" in err
    assert not (tmp_path / "o2").exists()


def test_a_run_that_cannot_read_the_inputs_refuses_the_comparison(runs_folder, capsys, tmp_path):
    """Every run is loaded before anything is written: a refused one names itself, and no
    output folder is left."""
    folder = tmp_path / "runs"
    shutil.copytree(runs_folder / "0_dot", folder / "0_dot")
    pair = train_pair_run(tmp_path / "pair", "model=transformer", "model.num_heads=2")
    shutil.copytree(pair, folder / "1_pairs")
    out = tmp_path / "out"
    rc, _, err = predict(capsys, f"ckpt_path={folder}", "text=a great film", f"out_dir={out}")
    assert rc == 2 and err.startswith(
        "error: 1_pairs: text= does not apply: model=transformer reads"
    )
    assert not out.exists()


def test_a_comparison_is_never_written_over(runs_folder, capsys, tmp_path):
    """An interrupted comparison's figures sit one level down, in the runs' folders (its
    predictions.jsonl, written last, is not there to be found)."""
    out = tmp_path / "out"
    (out / "0_dot").mkdir(parents=True)
    (out / "0_dot" / "example0000.png").write_text("earlier")
    rc, _, err = predict(capsys, f"ckpt_path={runs_folder}", "text=hi", f"out_dir={out}")
    assert rc == 2 and f"out_dir={out} already holds 0_dot: each run's figures go" in err
    assert (out / "0_dot" / "example0000.png").read_text() == "earlier"
    # one run's prediction beside earlier ones' folders is no comparison: nothing of theirs is hit
    (out / "0_dot" / "example0000.png").rename(out / "0_dot" / "earlier.png")
    rc, *_ = predict(capsys, f"ckpt_path={runs_folder / '0_dot'}", "text=hi", f"out_dir={out}")
    assert rc == 0 and (out / "example0000.png").is_file()
    assert [p.name for p in (out / "0_dot").iterdir()] == ["earlier.png"]


def test_a_folder_that_holds_no_run_is_said_to(capsys, tmp_path):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    rc, _, err = predict(capsys, f"ckpt_path={tmp_path / 'empty'}", "text=hi")
    assert rc == 2 and f"ckpt_path={tmp_path / 'empty'} holds no run (no run's metrics.json" in err


def test_out_dir_the_folder_of_runs_itself_is_refused(runs_folder, capsys, tmp_path):
    """Each run's figures go to <out_dir>/<run name>/: out_dir=<the folder of runs> put them into
    the runs themselves."""
    folder = tmp_path / "runs"
    for name in ("0_dot", "1_dot"):
        shutil.copytree(runs_folder / "0_dot", folder / name)
    rc, _, err = predict(capsys, f"ckpt_path={folder}", "text=hi", f"out_dir={folder}")
    assert rc == 2 and f"out_dir={folder} already holds 0_dot, 1_dot (runs): each run's" in err
    assert not list(folder.glob("**/example*")) and not list(folder.glob("*.*"))


def test_runs_whose_folder_names_meet_keep_their_own_figures(runs_folder, capsys, tmp_path):
    """`a/b` (a run two levels down) and `a__b` both come out as `a__b`: the second is `a__b~2`."""
    folder = tmp_path / "runs"
    shutil.copytree(runs_folder / "0_dot", folder / "a" / "b")
    shutil.copytree(runs_folder / "0_dot", folder / "a__b")
    out = tmp_path / "out"
    assert predict(capsys, f"ckpt_path={folder}", "text=a great film", f"out_dir={out}")[0] == 0
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [(r["run"], Path(r["files"][0]).parent.name) for r in rows] == [
        ("a/b", "a__b"),
        ("a__b", "a__b~2"),
    ]
    assert (out / "a__b" / "example0000.png").is_file()
    assert (out / "a__b~2" / "example0000.png").is_file()


def test_a_comparison_leaves_out_evaluations_and_shows_max_figures(runs_folder, capsys, tmp_path):
    """ckpt_path=outputs holds runs/ and evals/: an evaluation's record is no run to compare (it
    has no checkpoint); compare.html shows the first max_figures examples, with attention=false
    too."""
    folder = tmp_path / "outputs"
    shutil.copytree(runs_folder / "0_dot", folder / "runs" / "a")
    record = json.loads((folder / "runs" / "a" / "metrics.json").read_text())
    (folder / "evals" / "e").mkdir(parents=True)
    (folder / "evals" / "e" / "metrics.json").write_text(
        json.dumps({**record, "kind": "evaluate", "best_ckpt": None})
    )
    texts = tmp_path / "texts.txt"
    texts.write_text("a great film\nan awful film\n")
    out = tmp_path / "out"
    args = [f"texts_file={texts}", f"out_dir={out}", "max_figures=1", "attention=false"]
    rc, stdout, err = predict(capsys, f"ckpt_path={folder}", *args)
    assert rc == 0, err
    assert [line for line in stdout.splitlines() if line.startswith("run ")] == ["run runs/a:"]
    page = (out / "compare.html").read_text()
    assert "example 0: a great film" in page and "example 1:" not in page
    # attention=false keeps the weights out of predictions.jsonl, not out of the page
    assert "<b>pooling</b>" in page and "attention" not in (out / "predictions.jsonl").read_text()


def test_an_out_dir_under_home_is_checked_where_it_is_written(
    run_dir, capsys, tmp_path, monkeypatch
):
    """out_dir='~/p' was checked as ~/p and written as ./~/p: from inside a run, into the run,
    and over the earlier prediction there, whose check had looked elsewhere."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(run_dir)
    args = [f"ckpt_path={run_dir}", "text=a great film", "out_dir='~/p'"]
    assert predict(capsys, *args)[0] == 0
    assert (tmp_path / "home" / "p" / "predictions.jsonl").is_file()
    assert not (run_dir / "~").exists()
    rc, _, err = predict(capsys, *args)
    assert rc == 2 and f"out_dir={tmp_path / 'home' / 'p'} already holds predict outputs" in err


def test_a_dangling_link_in_out_dir_is_not_written_through(run_dir, capsys, tmp_path):
    """Written through, a dangling predictions.jsonl link made its target: a file in a run."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "predictions.jsonl").symlink_to(run_dir / "predictions.jsonl")
    rc, _, err = predict(capsys, f"ckpt_path={run_dir}", "text=hi", f"out_dir={out}")
    assert rc == 2 and "already holds predict outputs (predictions.jsonl)" in err
    assert not (run_dir / "predictions.jsonl").exists()


@pytest.mark.parametrize("value", ["", "null"])
def test_an_empty_ckpt_path_is_no_folder_of_runs(run_dir, capsys, tmp_path, monkeypatch, value):
    """ckpt_path= (empty) read as the current folder: every run below it was compared."""
    monkeypatch.chdir(run_dir.parent)
    rc, _, err = predict(capsys, f"ckpt_path={value}", "text=hi", f"out_dir={tmp_path / 'o'}")
    assert rc == 2 and "names no path: give ckpt_path=" in err and not (tmp_path / "o").exists()


def test_the_default_out_dir_inside_a_run_names_paths_log_dir(run_dir, capsys):
    rc, _, err = predict(capsys, f"ckpt_path={run_dir}", "text=hi", f"paths.log_dir={run_dir}")
    assert rc == 2 and f"is in the run {run_dir}" in err and "set paths.log_dir=" in err
    assert "drop out_dir=" not in err and not (run_dir / "predictions").exists()


def test_a_comparison_without_inputs_blames_no_run(runs_folder, capsys, tmp_path):
    rc, _, err = predict(capsys, f"ckpt_path={runs_folder}")
    assert rc == 2 and err.startswith("error: nothing to predict: give the runs' inputs")
    rc, _, err = predict(capsys, f"ckpt_path={runs_folder}", f"texts_file={tmp_path / 'none'}")
    assert rc == 2 and err.startswith(f"error: texts_file={tmp_path / 'none'} does not exist")
    (tmp_path / "empty.txt").write_text("")
    rc, _, err = predict(capsys, f"ckpt_path={runs_folder}", f"texts_file={tmp_path / 'empty.txt'}")
    assert rc == 2 and err.startswith(
        f"error: nothing to predict (texts_file={tmp_path / 'empty.txt'} holds no lines)"
    )


def test_attention_false_without_figures_computes_no_weights(
    run_dir, capsys, tmp_path, monkeypatch
):
    """The per-token weights are worked out only where predictions.jsonl keeps them or a figure
    draws them."""

    def refuse(*args):
        raise AssertionError("prediction_attention called")

    monkeypatch.setattr(TokenPredictor, "prediction_attention", refuse)
    args = [f"ckpt_path={run_dir}", "text=a great film", "figures=false"]
    assert predict(capsys, *args, "attention=false", f"out_dir={tmp_path / 'a'}")[0] == 0
    with pytest.raises(AssertionError, match="prediction_attention called"):
        predict(capsys, *args, f"out_dir={tmp_path / 'b'}")


def test_weights_drawn_and_kept_are_worked_out_once(run_dir, capsys, tmp_path, monkeypatch):
    """Figures and predictions.jsonl share one prediction_attention per batch (the figures
    worked it out a second time)."""
    calls = []
    original = TokenPredictor.prediction_attention

    def counted(self, *args):
        calls.append(1)
        return original(self, *args)

    monkeypatch.setattr(TokenPredictor, "prediction_attention", counted)
    texts = tmp_path / "texts.txt"
    texts.write_text("a great film\na dull film\n")
    args = [f"ckpt_path={run_dir}", f"texts_file={texts}", f"out_dir={tmp_path / 'out'}"]
    assert predict(capsys, *args)[0] == 0
    assert len(calls) == 1  # one batch of two texts
    (tmp_path / "out" / "example0001.html").read_text()  # both drawn, from that one call
    rows = (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()
    assert all("attention" in json.loads(row) for row in rows)


def test_mhsa_scores_analysis_recomputes_the_models_own_weights(run_dir, tmp_path):
    """docs/analysis/mhsa_scores.py: its scores, recomputed from the run's query and key
    projections, softmax to the weights the model returns (peak per text)."""
    analysis = load_analysis("mhsa_scores")
    texts = tmp_path / "texts.txt"
    texts.write_text("a great film\nthe plot was dull and the acting even worse\n")
    found = analysis.mhsa_scores(str(run_dir), str(texts))
    weights, mask = found["model_weights"], found["mask"]
    assert [row["tokens"] for row in found["trained"]] == mask.sum(-1).tolist()
    for b, row in enumerate(found["trained"]):
        n = row["tokens"]
        assert row["peak_vs_uniform"] == pytest.approx(float(weights[b, :, :n, :n].max() * n))
        assert row["score_spread"] > 0 and found["xavier_start"][b]["score_spread"] > 0
    assert found["input_rms"] > 0


def test_a_comparison_reads_its_texts_file_once(runs_folder, capsys, tmp_path, monkeypatch):
    """Every run gets the lines read once; a file that cannot be read is said as such, not as
    the first run's refusal."""
    import attnexp.runner.predict.inputs

    reads = []
    original = attnexp.runner.predict.inputs.read_lines

    def counted(*args):
        reads.append(args)
        return original(*args)

    monkeypatch.setattr(attnexp.runner.predict.inputs, "read_lines", counted)
    texts = tmp_path / "texts.txt"
    texts.write_text("a great film\n")
    args = [f"ckpt_path={runs_folder}", f"texts_file={texts}", "figures=false"]
    assert predict(capsys, *args, f"out_dir={tmp_path / 'a'}")[0] == 0
    assert len(reads) == 1
    texts.write_bytes(b"a great film \xff\n")
    rc, _, err = predict(capsys, *args, f"out_dir={tmp_path / 'b'}")
    assert rc == 2 and err.startswith(f"error: {texts} is not UTF-8 text") and "0_dot" not in err


def test_a_sweep_jobs_dir_is_read_unquoted(run_dir, capsys, tmp_path):
    """ckpt_path=<sweep>/1_scorer=dot,seed=0 as typed, with no Hydra quoting."""
    job = tmp_path / "sweep" / "1_scorer=dot,seed=0"
    shutil.copytree(run_dir, job)
    rc, out, err = predict(
        capsys,
        f"ckpt_path={job}",
        "text=a great film",
        "figures=false",
        f"out_dir={tmp_path / 'out'}",
    )
    assert rc == 0, err
    assert out.split()[0] in ("positive", "negative")


def test_predict_reads_no_split_so_imports_no_datasets(run_dir, tmp_path):
    """HF datasets tokenizes and caches the splits; predict reads none (~0.5 s of its start)."""
    result, imported = run_counting_imports(
        [
            "-m",
            "attnexp.predict",
            f"ckpt_path={run_dir}",
            "text=a great film",
            "figures=false",
            f"out_dir={tmp_path / 'out'}",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "torch" in imported and "datasets" not in imported


def test_attention_words_analysis_counts_every_token_of_the_split(runs_folder):
    """docs/analysis/attention_words.py: each view's weights are a distribution per review, every
    real token of the split is counted once, and the words come best first."""
    analysis = load_analysis("attention_words")
    for run, views in (("0_dot", ["pooling"]), ("2_mhsa", ["head0", "head1"])):
        tokenizer, found = analysis.attention_words(str(runs_folder / run), "test")
        assert list(found) == views
        cfg, choices, run_dir, _ = load_run(str(runs_folder / run))
        datamodule, _ = build(cfg, choices, artifacts_dir=str(run_dir))
        batches = list(datamodule.test_dataloader())
        reviews = sum(len(b["mask"]) for b in batches)
        tokens = sum(int(b["mask"].sum()) for b in batches)
        for totals in found.values():
            assert totals["reviews"] == reviews and int(totals["count"].sum()) == tokens
            assert totals["mass"] == pytest.approx(reviews, rel=1e-5)
            assert totals["peak"] >= reviews - 1e-3  # each review's peak is at least uniform
            assert 0 <= totals["entropy"] <= totals["longer"] + 1e-6
            words = analysis.top_words(totals, tokenizer, top=5, min_count=2)
            assert words and all(count >= 2 for _, _, count in words)
            assert [m for _, m, _ in words] == sorted((m for _, m, _ in words), reverse=True)
