"""The runner end to end: a CLI run, evaluate, resume, seeded determinism and the error messages."""

import gzip
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import yaml
from analysis_helpers import load_analysis
from cli_helpers import TINY, run_cli, run_cli_in_process
from conftest import CONF_DIR
from hydra.errors import ConfigCompositionException, MissingConfigException
from hydra.utils import instantiate
from imdb_data import train_in_process
from mnist_data import FILES, idx_bytes, write_mnist
from omegaconf import OmegaConf
from torch.multiprocessing import ProcessRaisedException
from torch.utils.data import DataLoader

from attnexp.cli.compose import compose_command_cfg
from attnexp.errors import ConfigError, spawned_refusal
from attnexp.runner.build import build, check_data_dir
from attnexp.runner.evaluate import (
    check_same_data,
    evaluate,
    make_test_trainer,
    multi_process_test_note,
    run_overrides,
)
from attnexp.runner.final_metrics import (
    best_score,
    checkpoint_step,
    scalar_metrics,
    validation_at,
    with_val_of,
)
from attnexp.runner.hparams import flatten_hparams, run_hparams
from attnexp.runner.load import find_checkpoint, load_run
from attnexp.runner.resume import check_resume_data, one_line, resume_step_of
from attnexp.runner.train import draw_seed
from attnexp.runner.trainer import (
    check_trainer_settings,
    device_name,
    lightning_settings,
    purge_setting,
)
from attnexp.runs import collect
from attnexp.runs.dirs import (
    RunDirGuard,
    check_new_dir,
    check_not_running,
    check_output_dir_not_set,
    check_output_root,
    guarding,
)
from attnexp.runs.layout import run_holding
from attnexp.runs.lock import owning
from attnexp.runs.overrides import override_arg
from attnexp.runs.record import RunRecord
from attnexp.runs.resume import (
    check_resume,
    check_resume_epochs,
    check_same_config,
    resolve_run_dir,
)
from attnexp.tasks.callbacks import EpochHistory, FiniteLosses, moved_state


def read(path: Path) -> dict:
    return json.loads(path.read_text())


NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")


def tiny_run(compose_cfg, tmp_path: Path, *overrides: str) -> dict:
    """A tiny bag run in this process (TINY, CSV logs, `overrides`) in tmp_path/run: its record."""
    (tmp_path / "data").mkdir(exist_ok=True)
    train_in_process(compose_cfg(*TINY, "logger=csv", *overrides), tmp_path / "run")
    return read(tmp_path / "run" / "metrics.json")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One tiny `python -m attnexp` run (subprocess), shared by the CLI, evaluate and resume tests."""
    tmp = tmp_path_factory.mktemp("cli")
    result = run_cli(tmp, *TINY)
    assert result.returncode == 0, result.stderr[-4000:]
    (run_dir,) = (tmp / "outputs" / "runs").iterdir()
    return tmp, run_dir, result


def test_cli_run_writes_a_complete_run_dir(finished_run):
    _, run_dir, result = finished_run
    record = read(run_dir / "metrics.json")
    assert record["status"] == "completed" and record["data_source"] == "sample"
    assert record["device"] == "cpu" and record["seed"] == 0 and record["duration_s"] > 0
    assert "data.batch_size=16" in record["overrides"] and record["version"]
    machine = record["machine"]  # what computed the numbers, to tell where they repeat
    assert (
        machine["torch"] == torch.__version__ and machine["cpu"] and machine["torch_threads"] >= 1
    )
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    for key in (
        "val/acc",
        "val/acc_best",
        "test/acc",
        "test/acc_bag1",
        "test/acc_bag3",
        "test/acc_variable",
    ):
        assert 0.0 <= record["metrics"][key] <= 1.0, key
    assert any("sample" in w for w in record["warnings"])
    # val/* are those of the tested (best) checkpoint; the last validation's are val/*_last
    assert record["metrics"]["val/acc"] == record["metrics"]["val/acc_best"]
    assert {"val/acc_last", "val/loss_last", "val/f1_last"} <= record["metrics"].keys()
    assert (run_dir / "checkpoints" / "last.ckpt").is_file() and (
        run_dir / record["best_ckpt"]
    ).is_file()
    assert list((run_dir / "tb").glob("events.out.tfevents.*"))
    assert (run_dir / ".hydra" / "config.yaml").is_file() and (run_dir / "train.log").is_file()
    assert "test/acc" in result.stdout  # the summary
    assert "stopped_early" not in record  # trained its max_epochs


@pytest.mark.slow
def test_quickstart_learns(tmp_path):
    """`make quickstart`'s command (the design card's) on the embedded IMDB sample, in full."""
    result = run_cli(
        tmp_path, "model=lstm_attn", "scorer=dot", "trainer=cpu", "trainer.max_epochs=3",
        "data.batch_size=32", "trainer.enable_progress_bar=false", timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    (run_dir,) = (tmp_path / "outputs" / "runs").iterdir()
    record = read(run_dir / "metrics.json")
    assert record["data_source"] == "sample"
    assert record["metrics"]["test/acc"] >= 0.7  # 0.5 is chance; measured 0.785 (docs/results.md)


def test_val_metrics_are_the_tested_checkpoints_not_the_last_validations(compose_cfg, tmp_path):
    """val/* in the record are those of the validation at the best (tested) checkpoint, the last
    validation's are val/*_last. The highest val/loss as the best makes the best checkpoint one
    that is not the last, so the two differ (with one validation, or a last one that is the best,
    they cannot); <monitor>_best is the best checkpoint's score, not the last validation's."""
    record = tiny_run(
        compose_cfg,
        tmp_path,
        "trainer.max_epochs=3",
        "trainer.accelerator=cpu",
        "callbacks.model_checkpoint.monitor=val/loss",
        "callbacks.model_checkpoint.mode=max",
    )
    rows = {row["step"]: row for row in record["validations"]}
    best_step = checkpoint_step(tmp_path / "run" / record["best_ckpt"])
    last_step = max(rows)
    assert best_step != last_step and rows[best_step]["val/loss"] != rows[last_step]["val/loss"]
    metrics = record["metrics"]
    for key in ("val/acc", "val/loss", "val/f1"):
        assert metrics[key] == pytest.approx(rows[best_step][key]), key
        assert metrics[f"{key}_last"] == pytest.approx(rows[last_step][key]), key
    assert metrics["val/loss_best"] == pytest.approx(rows[best_step]["val/loss"])


def test_evaluate_writes_its_own_dir_with_the_same_metrics(finished_run):
    tmp, run_dir, _ = finished_run
    before = (run_dir / "metrics.json").read_text()
    result = run_cli_in_process(
        tmp,
        f"ckpt_path={run_dir}/{read(run_dir / 'metrics.json')['best_ckpt']}",
        "trainer.enable_progress_bar=false",
        module="attnexp.evaluate",
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (eval_dir,) = (tmp / "outputs" / "evals").iterdir()
    record, run_record = read(eval_dir / "metrics.json"), read(run_dir / "metrics.json")
    assert record["status"] == "completed" and record["run_dir"] == str(run_dir)
    assert record["data_dir"] == run_record["data_dir"]  # report labels its data by it
    for key, value in run_record["metrics"].items():
        if key.startswith("test/acc"):
            assert record["metrics"][key] == pytest.approx(value, abs=1e-6), key
    assert (run_dir / "metrics.json").read_text() == before  # the run's record is untouched
    assert "test/acc_variable" in result.stdout
    assert "run_metrics_ckpt" not in record  # the run's metrics are of this checkpoint
    assert record["data_fingerprints"] == run_record["data_fingerprints"]
    assert len(run_record["data_hash"]) == 16  # the data as read: the report's data_hash
    assert set(run_record["data_fingerprints"]) == {"train", "val", "test"}
    assert not [w for w in record["warnings"] if "differ from the run's" in w]
    result = run_cli_in_process(
        tmp, f"ckpt_path={run_dir}/checkpoints/last.ckpt", module="attnexp.evaluate"
    )
    assert result.returncode == 0, result.stderr[-4000:]
    best = run_record["best_ckpt"]
    assert f"run:        the run's own test of its best checkpoint, {best}" in result.stdout


def test_evaluate_says_when_the_data_changed_since_training(tmp_path):
    """Test labels flipped after training: evaluate showed its accuracy beside the run's as if
    both were of the same data."""
    folder = write_mnist(tmp_path / "data", num_train=240, num_test=120)
    assert run_cli_in_process(tmp_path, *TINY, "data.source=local").returncode == 0
    (run_dir,) = (tmp_path / "outputs" / "runs").iterdir()
    labels = (9 - np.arange(120) % 10).astype(np.uint8)
    (folder / FILES["test"][1]).write_bytes(gzip.compress(idx_bytes(labels)))
    result = run_cli_in_process(tmp_path, f"ckpt_path={run_dir}", module="attnexp.evaluate")
    assert result.returncode == 0, result.stderr[-4000:]
    (eval_dir,) = (tmp_path / "outputs" / "evals").iterdir()
    warnings = read(eval_dir / "metrics.json")["warnings"]
    assert (
        "data: the test data differ from the run's (the data files changed since it trained?)"
        in (" ".join(warnings))
    )


def test_attention_by_bag_size_reads_the_runs_own_test_bags(finished_run):
    """docs/analysis/bag_attention_by_size.py: the accuracies it finds on the run's test bags are
    the run's test/acc_bag{n} (TINY tests one batch per set); the weights are a distribution."""
    analysis = load_analysis("bag_attention_by_size")
    _, run_dir, _ = finished_run
    rows = analysis.attention_by_size(str(run_dir), max_batches=1)
    metrics = read(run_dir / "metrics.json")["metrics"]
    assert [r["bag_size"] for r in rows] == [1, 3]
    for row in rows:
        assert row["acc"] == pytest.approx(metrics[f"test/acc_bag{row['bag_size']}"], abs=1e-6)
    assert rows[0]["weight_on_largest"] == pytest.approx(1.0) and rows[0]["norm_entropy"] == 0
    assert 0 < rows[1]["weight_on_largest"] <= 1 + 1e-6
    assert 0 < rows[1]["norm_entropy"] <= 1 + 1e-6


def test_evaluate_sweeps_never_write_over_earlier_evaluations(finished_run, tmp_path):
    """evaluate -m gets a new dir each time; a hydra.sweep.dir= holding an earlier one is refused
    (its jobs would write their configs over the earlier jobs' and take their records as resumed)."""
    _, run_dir, _ = finished_run
    args = ("-m", f"ckpt_path={run_dir}", "trainer.enable_progress_bar=false")
    default = run_cli(tmp_path, *args, module="attnexp.evaluate")
    assert default.returncode == 0, default.stderr[-4000:]
    (sweep,) = (tmp_path / "outputs" / "evals").iterdir()  # under paths.log_dir, not ./multirun
    record = read(sweep / "0" / "metrics.json")
    assert record["run_metrics"] == read(run_dir / "metrics.json")["metrics"]  # the summary's "run"
    assert "data: evaluated on the embedded sample, not the full dataset" in record["warnings"]
    before = snapshot(sweep)
    again = run_cli(
        tmp_path, *args, "seed=1", f"hydra.sweep.dir={sweep}", module="attnexp.evaluate"
    )
    assert again.returncode == 2, again.stderr[-4000:]
    assert f"hydra.sweep.dir={sweep} holds an earlier sweep" in again.stderr
    assert snapshot(sweep) == before


def test_evaluate_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_run(tmp_path / "nowhere.ckpt")
    (tmp_path / "stray.ckpt").write_bytes(b"")
    with pytest.raises(ConfigError, match="no run config"):
        load_run(tmp_path / "stray.ckpt")
    result = run_cli(tmp_path, module="attnexp.evaluate")
    assert result.returncode == 2 and "error: ckpt_path is missing" in result.stderr
    assert "Traceback" not in result.stderr
    result = run_cli(tmp_path, f"ckpt_path={tmp_path}/nowhere.ckpt", module="attnexp.evaluate")
    assert result.returncode == 2 and "does not exist" in result.stderr
    # both refused by the command line itself: no eval dir was made for them
    assert not (tmp_path / "outputs" / "evals").exists()


def test_evaluate_of_a_run_that_tested_nothing_says_what_to_set(tmp_path):
    """The run's limit_test_batches=0 (taken for evaluate's null) was said as if given, with
    "null for the run's own" as the fix: the value that caused it."""
    run_cfg = OmegaConf.create({"trainer": {"precision": "32-true", "limit_test_batches": 0}})
    cfg = OmegaConf.create(
        {
            "trainer": {
                "accelerator": "cpu",
                "devices": 1,
                "precision": None,
                "limit_test_batches": None,
                "enable_progress_bar": False,
            }
        }
    )
    with pytest.raises(
        ConfigError,
        match=r"trainer.limit_test_batches=0 \(the run's own: it tested nothing\) must be .*"
        r"set trainer.limit_test_batches=1.0",
    ):
        make_test_trainer(cfg, run_cfg, tmp_path)
    cfg.trainer.limit_test_batches = 1.0
    assert make_test_trainer(cfg, run_cfg, tmp_path).limit_test_batches == 1.0


def test_evaluate_settings_are_checked_before_loading(finished_run, tmp_path):
    """Lightning refused these with tracebacks, after the data was loaded (limit 0: no test)."""
    run_cfg = OmegaConf.create({"trainer": {"precision": "32-true", "limit_test_batches": None}})

    def evaluate_cfg(**trainer):
        defaults = {"accelerator": "cpu", "devices": 1, "precision": None}
        defaults |= {"limit_test_batches": None, "enable_progress_bar": False}
        return OmegaConf.create({"trainer": defaults | trainer})

    assert make_test_trainer(evaluate_cfg(), run_cfg, tmp_path).precision == "32-true"
    for trainer, match in (
        ({"devices": "abc"}, r"trainer.devices=abc: evaluate tests in one process.*devices=1"),
        ({"devices": 2}, r"trainer.devices=2: evaluate tests in one process.*counting some"),
        ({"devices": [0, 1]}, r"trainer.devices=\[0, 1\]: evaluate tests in one process"),
        ({"devices": "auto"}, r"trainer.devices=auto: evaluate tests in one process"),
        ({"precision": "16-mixed"}, r"trainer.precision=16-mixed: float16 autocast runs on GPUs"),
        ({"precision": 17}, r"^evaluate: Lightning refuses a trainer.\* .*Precision 17 is invalid"),
        ({"limit_test_batches": 0}, r"trainer.limit_test_batches=0 must be a number of batches"),
        ({"limit_test_batches": "abc"}, r"trainer.limit_test_batches='abc' must be a number"),
    ):
        with pytest.raises(ConfigError, match=match):
            make_test_trainer(evaluate_cfg(**trainer), run_cfg, tmp_path)
    gpu_run = OmegaConf.create({"trainer": {"precision": "16-mixed", "limit_test_batches": None}})
    with pytest.raises(ConfigError, match=r"trainer.precision=16-mixed: .*set trainer.precision"):
        make_test_trainer(evaluate_cfg(), gpu_run, tmp_path)  # the run's, Lightning ran bf16
    _, run_dir, _ = finished_run
    result = run_cli(tmp_path, f"ckpt_path={run_dir}", "seed=abc", module="attnexp.evaluate")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "error: seed='abc' must be a whole number from 0 to 2**32 - 1" in result.stderr


def test_evaluate_says_how_a_run_that_tested_under_ddp_differs():
    """A 2-process run tested 2 x limit batches, padded; evaluate tests in one process."""
    assert multi_process_test_note("cpu", 2) is None
    note = multi_process_test_note("cpu x2", 2)
    assert note.startswith("the run tested in 2 processes (cpu x2), each on its share")
    assert (
        "(for text, up to 1 test example(s) counted twice) and trainer.limit_test_batches=2 "
        in note
    )
    assert "per process (4 in all);" in note
    note = multi_process_test_note("cuda (NVIDIA H100 80GB HBM3) x4", 1.0)
    assert "in 4 processes" in note and "per process" not in note


def test_evaluate_tests_on_the_runs_kind_of_data(tmp_path):
    on_the_line = OmegaConf.create({"paths": {"data_dir": "/nowhere"}, "overrides": []})
    inside = OmegaConf.create(
        {"paths": {"data_dir": str(tmp_path)}, "overrides": ["paths.data_dir=/nowhere"]}
    )
    for cfg, cli in ((on_the_line, ["paths.data_dir=/nowhere"]), (inside, [])):
        with pytest.raises(ConfigError, match="paths.data_dir=/nowhere does not exist"):
            run_overrides(cfg, cli)
    cfg = inside
    record = {"data_source": "local"}
    with pytest.raises(ConfigError, match=r"tested on local data, this evaluation reads sample"):
        check_same_data("sample", record, cfg, [])  # e.g. the run's data dir has gone
    check_same_data("sample", record, cfg, ["data.source=sample"])  # asked for on purpose
    check_same_data("local", record, cfg, [])
    for unknown in ({}, {"data_source": None}):  # a record from before data_source was kept
        check_same_data("local", unknown, cfg, [])
    # no paths.data_dir= on the command line: the run's own data dir, not evaluate.yaml's default
    cfg = OmegaConf.create({"paths": {"data_dir": str(tmp_path)}, "overrides": ["seed=1"]})
    assert run_overrides(cfg, []) == ["seed=1"]
    given_dir = f"paths.data_dir={tmp_path}"
    assert run_overrides(cfg, [given_dir]) == [given_dir, "seed=1"]


def test_evaluate_refuses_other_data_before_loading_it(tmp_path):
    run = run_cli_in_process(tmp_path, *TINY, "data.source=auto")  # no mnist/, offline: the sample
    assert run.returncode == 0, run.stderr[-2000:]
    (run_dir,) = (tmp_path / "outputs" / "runs").iterdir()
    (tmp_path / "other" / "mnist").mkdir(parents=True)  # would be read; holds no files
    result = run_cli(
        tmp_path,
        f"ckpt_path={run_dir}",
        f"paths.data_dir={tmp_path}/other",
        module="attnexp.evaluate",
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "tested on sample data, this evaluation reads local data" in result.stderr
    assert "Traceback" not in result.stderr
    # its own failed record, not set aside as an earlier attempt's by a second, empty one
    (eval_dir,) = (tmp_path / "outputs" / "evals").iterdir()
    assert [p.name for p in eval_dir.glob("metrics*.json")] == ["metrics.json"]
    assert "this evaluation reads local data" in read(eval_dir / "metrics.json")["error"]


def test_resume_auto_then_a_run_dir(tmp_path):
    """A resumed run continues the whole training state. On the book's recipe (`~recipe`): the
    default's cosine schedule spans max_epochs, so a run resumed for more epochs than it started
    with follows another schedule than a run started for them."""
    tmp, book = tmp_path, [*TINY, "~recipe"]
    assert run_cli_in_process(tmp, *book).returncode == 0
    (run_dir,) = (tmp / "outputs" / "runs").iterdir()
    hydra_before = {p.name: p.read_text() for p in (run_dir / ".hydra").glob("*.yaml")}
    first = read(run_dir / "metrics.json")
    # resume=auto never reopens a completed run: it says so and starts a new one
    result = run_cli(tmp, *book, "resume=auto")
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"the newest run with these overrides, {run_dir}, has completed" in (
        result.stdout + result.stderr
    )
    assert len(list((tmp / "outputs" / "runs").iterdir())) == 2
    assert read(run_dir / "metrics.json") == first and not list(run_dir.glob("metrics.attempt*"))

    result = run_cli(tmp, *book, f"resume={run_dir}", "trainer.max_epochs=2")  # train on
    assert result.returncode == 0, result.stderr[-4000:]
    assert read(run_dir / "metrics.attempt1.json")["started_at"] == first["started_at"]
    record = read(run_dir / "metrics.json")
    assert record["status"] == "completed" and record["resumed_from_attempt"] == 1
    assert [h["epoch"] for h in record["history"]] == [0, 1]
    assert record["history"][1]["step"] == 2 * record["history"][0]["step"]
    # continued, not restarted: a restart validated epoch 0 again (its rows, keyed by epoch, hid it)
    assert [v["epoch"] for v in record["validations"]] == [0, 1]
    # ...and from the whole training state: the same epoch 1 as a run never interrupted (with a
    # fresh optimizer state, Adam's moments, the losses differed)
    (tmp / "straight").mkdir()
    straight = run_cli_in_process(tmp / "straight", *book, "trainer.max_epochs=2")
    assert straight.returncode == 0, straight.stderr[-4000:]
    (straight_dir,) = (tmp / "straight" / "outputs" / "runs").iterdir()
    straight_history = read(straight_dir / "metrics.json")["history"]
    for key in ("train/loss_epoch", "val/loss"):
        assert record["history"][1][key] == straight_history[1][key]
    assert record["metrics"]["val/acc"] == record["metrics"]["val/acc_best"]
    assert {p.name: p.read_text() for p in (run_dir / ".hydra").glob("*.yaml")} == hydra_before
    assert len(list((run_dir / ".hydra").glob("resume_*"))) == 1  # each attempt's own overrides
    assert len(list((run_dir / "tb").glob("events.out.tfevents.*"))) > 1  # same dashboard dir


def test_a_resume_that_fails_early_keeps_the_runs_record(finished_run, tmp_path):
    """A resumed attempt that fails before it saves a checkpoint leaves the run as it was: its
    record too (it read `failed`, with no metrics), with the failure added; evaluate and predict
    of the run dir take its best checkpoint, not last.ckpt."""
    _, run_dir, _ = finished_run
    run = shutil.copytree(run_dir, tmp_path / "run")
    before, attempts = read(run / "metrics.json"), sorted(run.glob("metrics.attempt*.json"))
    # paths.* may differ on resume; a data dir that is not there fails once the run has started
    missing = f"paths.data_dir={tmp_path}/missing"
    result = run_cli_in_process(tmp_path, *TINY, f"resume={run}", missing)
    assert result.returncode != 0 and missing in result.stderr
    record = read(run / "metrics.json")
    (failed,) = record.pop("failed_resumes")
    assert record == before and missing in failed["error"] and failed["at"]
    assert sorted(run.glob("metrics.attempt*.json")) == attempts  # another test may have resumed it
    assert find_checkpoint(run) == (run / before["best_ckpt"]).resolve()


def test_a_resume_must_build_the_config_the_run_was_made_with(compose_cfg, tmp_path):
    """Today's conf/*.yaml with the run's overrides must give the run's own config (unresolved),
    apart from what a resumed run may change: an older attnexp's run went on as another model."""
    cfg = compose_cfg(*TINY, "~recipe")  # the book's recipe: data.shift=0
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    saved = OmegaConf.to_container(cfg, resolve=False)
    del saved["hydra"]
    saved.update(resume="auto", trainer={**saved["trainer"], "max_epochs": 7})
    saved["paths"]["data_dir"] = "elsewhere"
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(saved))
    check_same_config(cfg, run_dir, str(run_dir))
    # keys at the default of the argument they set are no exception: BagAttention's backbone and
    # attention defaults are these, and a run without them is refused all the same
    assert cfg.model.backbone == "mlp" and cfg.model.attention == "context"
    listed_later = ("backbone", "attention")
    bare = {**saved, "model": {k: v for k, v in saved["model"].items() if k not in listed_later}}
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(bare))
    with pytest.raises(
        ConfigError, match=r"\(model.attention: the run's <absent>, today's context;"
    ):
        check_same_config(cfg, run_dir, str(run_dir))
    # as a run made before model.pooled_norm existed wrote it
    del saved["model"]["pooled_norm"]
    saved["data"].update(label_rule="smallest", shift=3, old_key=[1, 2], other=None, more=True)
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(saved))
    with pytest.raises(ConfigError) as err:
        check_same_config(cfg, run_dir, str(run_dir))
    assert str(err.value) == (
        f"resume={run_dir}: the run was made with other config files than today's (an older or "
        f"newer attnexp, or an edited conf/): with its overrides they now give another config "
        f"(data.label_rule: the run's smallest, today's largest; data.more: the run's true, "
        f"today's <absent>; data.old_key: the run's [1, 2], today's <absent>; data.other: the "
        f"run's null, today's <absent>; data.shift: the run's 3, today's 0; and 1 more). A "
        f"resumed run must continue the run it was, so it is not resumed: to test it again, "
        f"python -m attnexp.evaluate ckpt_path={run_dir} (builds it from its own saved config); "
        f"or start a new run with today's config (drop resume=)"
    )
    del saved["data"]["more"]  # five differences: all shown, no "and 0 more"
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(saved))
    with pytest.raises(ConfigError) as five:
        check_same_config(cfg, run_dir, str(run_dir))
    assert "model.pooled_norm: the run's <absent>, today's " in str(five.value)
    assert "more)" not in str(five.value)
    with pytest.raises(ConfigError, match=rf"^resume=auto \(the run it found, {run_dir}\): the"):
        check_same_config(cfg, run_dir, "auto")
    (run_dir / ".hydra" / "config.yaml").write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match=r"config.yaml cannot be read \(.*\), so whether"):
        check_same_config(cfg, run_dir, str(run_dir))


def _saved_without(cfg, run_dir, key: str) -> None:
    """Writes `cfg` as the run's .hydra/config.yaml, less `key` (node.name)."""
    saved = OmegaConf.to_container(cfg, resolve=False)
    del saved["hydra"]
    node, name = key.split(".")
    del saved[node][name]
    (run_dir / ".hydra").mkdir(parents=True, exist_ok=True)
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(saved))


def test_a_key_the_run_lacks_at_its_signature_default_is_not_the_run_it_was(compose_cfg, tmp_path):
    """A key a run's saved config lacks, at the default of the argument it sets, need not give
    what the run was built with (the code behind the default may have changed): refused."""
    cfg = compose_cfg("model=transformer")
    assert cfg.data.min_frequency == 1
    run_dir = tmp_path / "run"
    _saved_without(cfg, run_dir, "data.min_frequency")
    with pytest.raises(ConfigError, match=r"\(data.min_frequency: the run's <absent>, today's 1\)"):
        check_same_config(cfg, run_dir, str(run_dir))


def test_a_refused_resume_logs_no_error_of_its_own(compose_cfg, tmp_path, caplog):
    """The check of a key the run lacks under a function's node (the scheduler's) refuses it
    without an 'Error getting class' line from Hydra before the refusal."""
    cfg = compose_cfg("model=transformer")
    run_dir = tmp_path / "run"
    _saved_without(cfg, run_dir, "scheduler.warmup_ratio")
    with pytest.raises(ConfigError, match=r"scheduler.warmup_ratio: the run's <absent>"):
        check_same_config(cfg, run_dir, str(run_dir))
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []


def test_a_run_made_with_other_config_files_is_not_resumed(finished_run, tmp_path):
    """resume=<dir> and resume=auto: refused before the run's record is touched."""
    _, run_dir, _ = finished_run
    run = shutil.copytree(run_dir, tmp_path / "outputs" / "runs" / "old")
    record = read(run / "metrics.json")  # interrupted: resume=auto passes completed runs by
    (run / "metrics.json").write_text(json.dumps({**record, "status": "failed"}))
    config = run / ".hydra" / "config.yaml"
    older = config.read_text().replace("  pooled_norm: true\n", "")
    config.write_text(older.replace("  lr: 0.001\n", "  lr: 0.01\n"))
    before = snapshot(run)
    for resume, which in ((run, ""), ("auto", f" (the run it found, {run})")):
        result = run_cli(tmp_path, *TINY, f"resume={resume}")
        assert result.returncode == 2, result.stderr[-4000:]
        assert "Traceback" not in result.stderr
        assert (
            f"error: resume={resume}{which}: the run was made with other config files than "
            f"today's (an older or newer attnexp, or an edited conf/): with its overrides they "
            f"now give another config (model.pooled_norm: the run's <absent>, today's true; "
            f"optimizer.lr: the run's 0.01, today's 0.001). A resumed run must continue the run "
            f"it was, so it is not resumed: to test it again, python -m attnexp.evaluate "
            f"ckpt_path={run} "
        ) in result.stderr
        assert snapshot(run) == before


@pytest.mark.parametrize("other", ["source", "files"])
def test_a_resume_reads_the_data_the_run_trained_on(finished_run, tmp_path, other):
    """paths.* may change on resume (data that moved), so what is read is compared: a resume that
    forgot paths.data_dir went on with the embedded sample, its record mixing two datasets."""
    _, run_dir, _ = finished_run
    run = shutil.copytree(run_dir, tmp_path / "run")
    record = read(run / "metrics.json")
    if other == "source":  # as if the run had trained on local files
        record.update(data_source="local", data_dir="/data/full")
        said = (
            f"error: resume={run}: the run trained on local data, this attempt reads sample data "
            f"(paths.data_dir="
        )
        where = "a resumed run goes on with its own data (give paths.data_dir=/data/full)"
    else:  # as if its validation files had changed since
        record["data_fingerprints"]["val"] = "0" * 16
        said = f"error: resume={run}: the val data this attempt reads (paths.data_dir="
        where = "differ from what the run trained on: a resumed run goes on with its own data"
    (run / "metrics.json").write_text(json.dumps(record))
    last = (run / "checkpoints" / "last.ckpt").read_bytes()
    result = run_cli_in_process(tmp_path, *TINY, f"resume={run}", "trainer.max_epochs=2")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-4000:]
    assert said in result.stderr and where in result.stderr, result.stderr[-2000:]
    after = read(run / "metrics.json")  # the run as it was, the failed resume added
    assert after.pop("failed_resumes") and after == record
    assert (run / "checkpoints" / "last.ckpt").read_bytes() == last


@pytest.mark.parametrize("misfit", ["optimizer", "weights"])
def test_a_last_checkpoint_this_version_cannot_load_is_said(finished_run, tmp_path, misfit):
    """A run from before the optimizer's parameter groups were split by decay setting, or with a
    layer of another shape: Lightning's traceback, after the run's record was set aside."""
    _, run_dir, _ = finished_run
    run = shutil.copytree(run_dir, tmp_path / "run")
    last = run / "checkpoints" / "last.ckpt"
    state = torch.load(last, weights_only=False)
    if misfit == "optimizer":
        groups = state["optimizer_states"][0]["param_groups"]
        groups.append({**groups[0], "params": [groups[0]["params"].pop()]})
        reason = "loaded state dict has a different number of parameter groups"
    else:
        state["state_dict"]["model.head.4.weight"] = torch.zeros(10, 32)
        reason = (
            r"Error\(s\) in loading state_dict for ClassificationTask: size mismatch for "
            r"model.head.4.weight: copying a param with shape torch.Size\(\[10, 32\]\)"
        )
    torch.save(state, last)
    record, saved = read(run / "metrics.json"), last.read_bytes()
    result = run_cli_in_process(
        tmp_path, *TINY, f"resume={run}", f"trainer.max_epochs={state['epoch'] + 2}"
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-4000:]
    what = "optimizer" if misfit == "optimizer" else "model"
    assert re.search(
        rf"error: resume={run}: the run's last checkpoint, {last}, does not fit the {what} "
        rf"this version of attnexp builds from the run's config \({reason}.*\): it was saved by "
        rf"another version",
        result.stderr,
    )
    evaluate = f"python -m attnexp.evaluate ckpt_path={run} (which loads the weights only)"
    assert (evaluate in result.stderr) == (misfit == "optimizer")
    after = read(run / "metrics.json")  # the run as it was, with the failed resume added
    assert after.pop("failed_resumes") and after == record and last.read_bytes() == saved


def resumed_record(run_dir: Path) -> RunRecord:
    """A resumed attempt's record of a completed run with a last checkpoint, started."""
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"epoch 3")
    earlier = {"status": "completed", "metrics": {"test/acc": 0.5}, "best_ckpt": "checkpoints/b"}
    (run_dir / "metrics.json").write_text(json.dumps(earlier))
    record = RunRecord(run_dir, seed=0, overrides=[])
    record.start()
    started = read(run_dir / "metrics.json")
    # the earlier best stays the best (evaluate, a report read it) until this attempt saves one
    assert started["status"] == "running" and started["best_ckpt"] == "checkpoints/b"
    return record


def test_a_resume_ended_before_a_checkpoint_puts_the_runs_record_back(tmp_path):
    """Nothing of the run changed, so it reads as it did (not `failed` without metrics), with
    what happened added; a Ctrl-C too."""
    record = resumed_record(tmp_path)
    earlier = read(tmp_path / "metrics.attempt1.json")
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            sys.exit(1)  # as Lightning ends a Ctrl-C
    except SystemExit as err:
        record.fail(err)
    put_back = read(tmp_path / "metrics.json")
    (failed,) = put_back.pop("failed_resumes")
    assert put_back == earlier and failed["error"].startswith("interrupted (KeyboardInterrupt")
    assert not (tmp_path / "metrics.attempt1.json").exists()
    record.fail(ValueError("again"))  # this attempt's record is gone: nothing more is written
    assert "failed_resumes" in read(tmp_path / "metrics.json")
    again = RunRecord(tmp_path, seed=0, overrides=[])
    again.start()
    again.fail(ValueError("bad"))
    errors = [f["error"] for f in read(tmp_path / "metrics.json")["failed_resumes"]]
    assert errors[1:] == ["ValueError: bad"]
    other_rank = RunRecord(tmp_path, seed=0, overrides=[], write=False)  # rank 0 writes
    other_rank.start()
    other_rank.fail(ValueError("rank 1"))
    assert len(read(tmp_path / "metrics.json")["failed_resumes"]) == 2


@pytest.mark.parametrize("saved", [b"epoch 4, saved by this attempt", b"epoch 4"])
def test_a_resume_that_saved_a_checkpoint_keeps_its_failed_record(tmp_path, saved):
    """A new last.ckpt changed the run: the failed attempt's record stays, the earlier one beside.
    A checkpoint of the same model is often the same size as the one it replaces (b"epoch 4")."""
    record = resumed_record(tmp_path)
    earlier = read(tmp_path / "metrics.attempt1.json")
    last = tmp_path / "checkpoints" / "last.ckpt"
    written = last.stat().st_mtime_ns
    last.write_bytes(saved)
    os.utime(last, ns=(written + 10**9, written + 10**9))  # a second later, whatever the clock
    record.fail(ValueError("bad"))
    failed = read(tmp_path / "metrics.json")
    assert failed["status"] == "failed" and failed["error"] == "ValueError: bad"
    assert "failed_resumes" not in failed
    assert read(tmp_path / "metrics.attempt1.json") == earlier


def test_a_ctrl_c_is_recorded_as_an_interruption(tmp_path):
    """Lightning ends a KeyboardInterrupt with sys.exit(1): the record said "SystemExit: 1"."""
    record = RunRecord(tmp_path, seed=0, overrides=[])
    record.start()
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            sys.exit(1)
    except SystemExit as err:
        record.fail(err)
    assert read(tmp_path / "metrics.json")["error"] == (
        "interrupted (KeyboardInterrupt, Ctrl-C): resume=<this run dir> continues it"
    )
    record.fail(ValueError("bad"))
    assert read(tmp_path / "metrics.json")["error"] == "ValueError: bad"


def test_a_failure_keeps_what_a_ddp_spawn_worker_recorded(tmp_path):
    """Under ddp_spawn the rank-0 worker writes the epochs, validations and best checkpoint; the
    main process's failure record overwrote them with its own empty copy (a Ctrl-C lost them)."""
    record = RunRecord(tmp_path, seed=0, overrides=[])
    record.start()
    worker = read(tmp_path / "metrics.json")
    worker.update(
        history=[{"epoch": 0, "step": 4}],
        validations=[{"epoch": 0, "step": 4, "val/acc": 0.5}],
        best_ckpt="checkpoints/epoch000.ckpt",
    )
    (tmp_path / "metrics.json").write_text(json.dumps(worker))
    record.fail(KeyboardInterrupt())
    failed = read(tmp_path / "metrics.json")
    assert failed["status"] == "failed"
    assert {k: failed[k] for k in ("history", "validations", "best_ckpt")} == {
        k: worker[k] for k in ("history", "validations", "best_ckpt")
    }


def test_a_warning_stays_in_the_record_of_a_run_that_fails_later(tmp_path):
    """warn() records a decision taken for the user; a failure afterwards (which takes the
    worker's keys, warnings among them, from the file) keeps it."""
    record = RunRecord(tmp_path, seed=0, overrides=[])
    record.start()
    record.warn("data: the embedded sample, not the full dataset")
    record.fail(ValueError("bad"))
    failed = read(tmp_path / "metrics.json")
    assert failed["status"] == "failed"
    assert failed["warnings"] == ["data: the embedded sample, not the full dataset"]


@pytest.mark.parametrize("damaged", ['{"status": "comp', "[]"])
def test_a_resumed_record_that_cannot_be_read_is_set_aside_and_said(tmp_path, caplog, damaged):
    """An earlier record cut short (a full disk) or not a record at all (an edit by hand; the
    resume checks read it as no record) is kept aside as the earlier attempt's like any other,
    its loss of history is said, and the resumed attempt records on."""
    (tmp_path / "metrics.json").write_text(damaged)
    record = RunRecord(tmp_path, seed=0, overrides=[])
    record.start()
    assert read(tmp_path / "metrics.json")["status"] == "running"
    assert (tmp_path / "metrics.attempt1.json").read_text() == damaged
    assert "could not read the history of" in caplog.text


def test_the_report_reads_the_seed_and_overrides_a_record_keeps(tmp_path):
    """The report groups and labels runs by the seed and command-line overrides their records
    keep: a record written by RunRecord reads back as the run it was."""
    run_dir = tmp_path / "runs" / "a"
    record = RunRecord(run_dir, seed=3, overrides=["scorer=dot", "trainer.max_epochs=2"])
    record.start()
    record.complete({"test/acc": 0.5})
    run = collect.read_run(run_dir / "metrics.json", tmp_path)  # the report's reader
    assert (run.status, run.seed, run.metrics) == ("completed", 3, {"test/acc": 0.5})
    assert run.settings["scorer"] == "dot" and run.settings["trainer.max_epochs"] == "2"


def test_a_loss_that_turns_nan_ends_the_run(tmp_path):
    """In float16 (16-true) the bag model's loss turned NaN in the first epoch; the run trained on,
    tested its NaN weights (accuracy 0) and recorded "completed"."""
    result = run_cli_in_process(
        tmp_path, *TINY, "trainer.precision=16-true", "trainer.limit_train_batches=4"
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "error: val/loss is nan at epoch 0, step 4: training diverged" in result.stderr
    assert "trainer.precision=16-true computes in float16" in result.stderr
    (run_dir,) = (tmp_path / "outputs" / "runs").iterdir()
    record = read(run_dir / "metrics.json")
    assert record["status"] == "failed" and "val/loss is nan" in record["error"]
    assert "test/acc" not in record.get("metrics", {})


def test_finite_losses_read_the_logged_values_only():
    check = FiniteLosses()
    trainer = SimpleNamespace(
        callback_metrics={"val/loss": torch.tensor(0.7), "train/loss_epoch": torch.tensor(0.6)},
        sanity_checking=False,
        precision="32-true",
        current_epoch=3,
        global_step=40,
    )
    check.on_validation_end(trainer, None)
    check.on_train_end(trainer, None)
    trainer.callback_metrics["train/loss_epoch"] = torch.tensor(float("inf"))
    with pytest.raises(ConfigError, match=r"train/loss_epoch is inf at epoch 3, step 40: .*lower"):
        check.on_train_epoch_start(trainer, None)
    trainer.precision = "16-mixed"  # its gradient scaler skipped the overflowing step
    check.on_train_epoch_start(trainer, None)
    trainer.callback_metrics["val/loss"] = torch.tensor(float("nan"))
    with pytest.raises(ConfigError, match=r"val/loss is nan .*16-mixed computes in float16"):
        check.on_validation_end(trainer, None)
    trainer.sanity_checking = True  # the untrained model's check is not the run's
    check.on_validation_end(trainer, None)


def test_a_refusal_in_a_spawned_process_is_said_as_one():
    """ddp_spawn hands the main process torch's ProcessRaisedException, the worker's traceback."""
    text = (
        "\n\n-- Process 1 terminated with the following error:\nTraceback (most recent call last):\n"
        '  File "x.py", line 1, in f\nattnexp.errors.ConfigError: val/loss is nan at epoch 0\n'
    )
    refusal = spawned_refusal(ProcessRaisedException(text, 1, 123))
    assert isinstance(refusal, ConfigError) and str(refusal) == "val/loss is nan at epoch 0"
    crash = ProcessRaisedException(text.replace("attnexp.errors.ConfigError", "KeyError"), 1, 1)
    assert spawned_refusal(crash) is None and spawned_refusal(ValueError("x")) is None


def test_the_record_follows_the_best_checkpoint_as_it_is_saved(tmp_path):
    """A new best is recorded once its file is written (Lightning writes it before last.ckpt and
    deletes the one it replaces after it), so a run that dies later still names its best."""
    record = RunRecord(tmp_path, seed=0, overrides=[])
    record.start()
    best = tmp_path / "checkpoints" / "epoch001.ckpt"
    last = tmp_path / "checkpoints" / "last.ckpt"
    trainer = SimpleNamespace(
        checkpoint_callbacks=[  # last.ckpt's first: the best is the one with a monitor
            SimpleNamespace(monitor=None, best_model_path=str(last)),
            SimpleNamespace(monitor="val/acc", best_model_path=str(best)),
        ],
        is_global_zero=True,
    )
    history = EpochHistory(record)
    history.on_save_checkpoint(trainer, None, {})  # the new best is being written
    assert "best_ckpt" not in read(tmp_path / "metrics.json")
    best.parent.mkdir()
    best.touch()
    last.touch()
    history.on_save_checkpoint(trainer, None, {})  # last.ckpt, written after it
    assert read(tmp_path / "metrics.json")["best_ckpt"] == "checkpoints/epoch001.ckpt"


def test_a_moved_run_resumes_with_its_own_best_checkpoint(finished_run, tmp_path):
    """The checkpoint names its files by absolute path: after a move, the resumed run takes the
    files in its new dir (it stopped with FileNotFoundError for the old best path)."""
    _, run_dir, _ = finished_run
    moved = tmp_path / "moved"
    shutil.copytree(run_dir, tmp_path / "first_place").rename(moved)
    best = read(moved / "metrics.json")["best_ckpt"]
    # two more epochs (another test may have resumed it), so two fewer is still >= 1
    epochs = len(read(moved / "metrics.json")["history"]) + 2
    result = run_cli_in_process(tmp_path, *TINY, f"resume={moved}", f"trainer.max_epochs={epochs}")
    assert result.returncode == 0, result.stderr[-4000:]
    record = read(moved / "metrics.json")
    assert record["status"] == "completed" and (moved / record["best_ckpt"]).is_file()
    kept = torch.load(moved / "checkpoints" / "last.ckpt", weights_only=False)["callbacks"]
    assert all(str(moved) in state["dirpath"] for state in kept.values())
    # save_top_k=1 held: the moved best was tracked, so a better one replaced it, not joined it
    kept_best = [p.name for p in (moved / "checkpoints").glob("*.ckpt") if p.name != "last.ckpt"]
    assert kept_best == [Path(record["best_ckpt"]).name]
    assert record["best_ckpt"] == best or not (moved / best).exists()
    # resumed to fewer epochs than it has trained: refused before its record is touched
    result = run_cli(tmp_path, *TINY, f"resume={moved}", f"trainer.max_epochs={epochs - 2}")
    assert result.returncode == 2 and "a resumed run trains on, never back" in result.stderr
    assert read(moved / "metrics.json") == record


def test_moved_state_points_the_old_paths_into_the_new_dir():
    state = {
        "dirpath": "/old/run/checkpoints",
        "best_model_path": "/old/run/checkpoints/epoch001.ckpt",
        "kth_best_model_path": "/old/run/checkpoints/epoch001.ckpt",
        "last_model_path": "/old/run/checkpoints/last.ckpt",  # save_last=true
        "best_k_models": {"/old/run/checkpoints/epoch001.ckpt": 0.9, "/elsewhere/e.ckpt": 0.8},
        "best_model_score": 0.9,
    }
    moved = moved_state(state, "/old/run/checkpoints", "/new/run/checkpoints")
    assert moved == {
        "dirpath": "/new/run/checkpoints",
        "best_model_path": "/new/run/checkpoints/epoch001.ckpt",
        "kth_best_model_path": "/new/run/checkpoints/epoch001.ckpt",
        "last_model_path": "/new/run/checkpoints/last.ckpt",
        "best_k_models": {"/new/run/checkpoints/epoch001.ckpt": 0.9, "/elsewhere/e.ckpt": 0.8},
        "best_model_score": 0.9,
    }  # a file outside the old dir is not the run's: left where it is


def test_settings_that_would_write_into_another_run_are_refused(finished_run, tmp_path):
    _, run_dir, _ = finished_run
    last = (run_dir / "checkpoints" / "last.ckpt").read_bytes()
    result = run_cli(tmp_path, *TINY, f"paths.output_dir={run_dir}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "paths.output_dir is the run's own dir, made new by Hydra" in result.stderr
    result = run_cli(tmp_path, "-m", *TINY, "seed=0,1", f"paths.output_dir={run_dir}")
    assert result.returncode == 2 and "paths.output_dir is the run's own dir" in result.stderr
    result = run_cli(tmp_path, *TINY, f"resume={run_dir}", f"hydra.run.dir={tmp_path / 'new'}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "and hydra.run.dir= would put it elsewhere (drop hydra.run.dir=)" in result.stderr
    assert (run_dir / "checkpoints" / "last.ckpt").read_bytes() == last
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "new").exists()


def test_a_check_that_cannot_be_made_stops_the_run(capsys):
    """Hydra turns a callback's exception into a warning and goes on: the guard must not."""
    with pytest.raises(SystemExit) as end, guarding("the run dir"):
        raise yaml.YAMLError("mapping values are not allowed here")
    assert end.value.code == 2
    assert "checking the run dir failed, so nothing was started: YAMLError" in (
        capsys.readouterr().err
    )


def test_a_resumed_run_keeps_its_logs_up_to_its_checkpoint(tmp_path):
    """TensorBoard and CSV: the first attempt's points stay; what it logged after its last
    checkpoint (as if it died there) is replaced by what the resumed run logs."""
    from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    settings = [*TINY, "logger=many"]
    assert run_cli_in_process(tmp_path, *settings).returncode == 0
    (run_dir,) = (tmp_path / "outputs" / "runs").iterdir()
    resume_step = checkpoint_step(run_dir / "checkpoints" / "last.ckpt")
    metrics_csv = run_dir / "csv" / "metrics.csv"
    header, *first = metrics_csv.read_text().splitlines()
    before_resume = [row for row in first if int(row.split(",")[1]) < resume_step]
    assert before_resume and len(before_resume) < len(first)  # the test row is at resume_step
    writer = SummaryWriter(run_dir / "tb")  # the interrupted attempt's last points
    writer.add_scalar("val/acc", 7.0, resume_step + 1)
    writer.close()
    with metrics_csv.open("a") as file:
        file.write(f"1,{resume_step + 1}" + ",7.0" * (header.count(",") - 1) + "\n")

    result = run_cli(tmp_path, *settings, f"resume={run_dir}", "trainer.max_epochs=2")
    assert result.returncode == 0, result.stderr[-4000:]
    rows = metrics_csv.read_text().splitlines()[1:]
    assert rows[: len(before_resume)] == before_resume  # epoch 0's rows, as written
    assert len(rows) == 2 * len(before_resume) + 1  # epochs 0 and 1, one test row
    assert "7.0" not in metrics_csv.read_text()
    assert "7.0" in (run_dir / "csv" / "metrics.attempt1.csv").read_text()  # kept aside, whole
    events = EventAccumulator(str(run_dir / "tb"))
    events.Reload()
    assert [e.step for e in events.Tensors("val/acc")] == [resume_step - 1, 2 * resume_step - 1]
    # each validation's figure, at its val/acc point: the one before the checkpoint stays shown
    figures = [e.step for e in events.Tensors("attention/val_examples")]
    assert figures == [resume_step - 1, 2 * resume_step - 1]
    assert [e.step for e in events.Tensors("test/acc")] == [2 * resume_step]  # the resumed run's


def stub_run(run_dir: Path, overrides: str) -> Path:
    """A run dir as resume's checks read it: a last.ckpt (empty) and the overrides.yaml of the
    command that started it."""
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"")
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "overrides.yaml").write_text(overrides)
    (run_dir / "metrics.json").write_text('{"status": "failed"}\n')
    return run_dir


def test_resume_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"resume=.*nowhere: no checkpoints/last.ckpt"):
        check_resume(str(tmp_path / "nowhere"), [])
    run_dir = stub_run(tmp_path / "run", "- model.hidden_size=16\n- seed=1\n")
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 1\n")
    check_resume(str(run_dir), ["seed=1", "model.hidden_size=16", "trainer.max_epochs=9"])
    with pytest.raises(ConfigError, match=r"differing: model.hidden_size, scorer\)") as err:
        check_resume(str(run_dir), ["seed=1", "model.hidden_size=8", "scorer=dot"])
    assert f"python -m attnexp model.hidden_size=16 seed=1 resume={run_dir}" in str(err.value)
    assert "data.num_workers, paths.* may change" in str(err.value)
    assert Path(resolve_run_dir("auto", str(tmp_path), ["seed=1"])).parent == tmp_path  # none: new
    # resume=auto finds the run also when a setting that may change does (train longer)
    runs_root = run_dir.parent
    longer = ["seed=1", "model.hidden_size=16", "trainer.max_epochs=9"]
    assert resolve_run_dir("auto", str(runs_root), longer) == str(run_dir)
    assert resolve_run_dir("auto", str(runs_root), ["seed=1"]) != str(run_dir)  # not the same run
    # two such runs: the one whose last.ckpt is newest; one without a last.ckpt never
    newer = shutil.copytree(run_dir, tmp_path / "newer")
    os.utime(run_dir / "checkpoints" / "last.ckpt", (1e9, 1e9))
    assert resolve_run_dir("auto", str(runs_root), longer) == str(newer)
    (newer / "checkpoints" / "last.ckpt").unlink()
    assert resolve_run_dir("auto", str(runs_root), longer) == str(run_dir)
    with pytest.raises(ConfigError, match=r"lies inside the run .*: give the run dir, resume="):
        check_resume(str(run_dir / "checkpoints" / "last.ckpt"), longer)
    # a damaged overrides.yaml: resume=<dir> says so, resume=auto passes the run by
    (run_dir / ".hydra" / "overrides.yaml").write_text("- model.hidden_size=16\n  seed: [1\n")
    with pytest.raises(ConfigError, match=r"overrides.yaml cannot be read, so whether this"):
        check_resume(str(run_dir), longer)
    assert resolve_run_dir("auto", str(runs_root), longer) != str(run_dir)


def test_resume_null_in_any_spelling_starts_a_new_run(tmp_path):
    for no_resume in (None, "", "null", "None"):  # resume=None on a command line is a string
        assert Path(resolve_run_dir(no_resume, str(tmp_path), [])).parent == tmp_path


def test_a_run_started_without_overrides_can_be_resumed(tmp_path):
    """An empty .hydra/overrides.yaml is a run started with none, not one that cannot be read."""
    run_dir = stub_run(tmp_path / "run", "")
    check_resume(str(run_dir), ["trainer.max_epochs=3"])
    assert resolve_run_dir("auto", str(tmp_path), ["trainer.max_epochs=3"]) == str(run_dir)
    # a setting removed with ~ is named by its key
    (run_dir / ".hydra" / "overrides.yaml").write_text("- ~callbacks.early_stopping\n")
    with pytest.raises(ConfigError, match=r"\(differing: callbacks.early_stopping\)"):
        check_resume(str(run_dir), [])
    # no overrides.yaml at all (copied without .hydra/): nothing to compare, not unreadable
    (run_dir / ".hydra" / "overrides.yaml").unlink()
    check_resume(str(run_dir), ["trainer.max_epochs=3"])
    # a metrics.json that holds no record (a JSON list) says nothing: no status, no writer
    (run_dir / "metrics.json").write_text("[1, 2]")
    assert resolve_run_dir(str(run_dir), str(tmp_path), []) == str(run_dir)
    check_not_running(run_dir, f"resume={run_dir}")


def test_resume_auto_never_reopens_a_completed_run(tmp_path, caplog):
    run_dir = stub_run(tmp_path / "run", "[]\n")
    (run_dir / "metrics.json").write_text(json.dumps({"status": "failed"}))
    assert resolve_run_dir("auto", str(tmp_path), []) == str(run_dir)
    (run_dir / "metrics.json").write_text(json.dumps({"status": "completed"}))
    caplog.clear()
    new = resolve_run_dir("auto", str(tmp_path), [])
    assert new != str(run_dir) and Path(new).parent == tmp_path
    assert f"{run_dir}, has completed (to train it on: resume={run_dir}" in caplog.text
    # resume=<dir> of a completed run says what it will train: one stopped early trains on
    stopped = {"epoch": 1, "step": 4, "reason": "Monitored metric val/acc did not improve"}
    (run_dir / "metrics.json").write_text(
        json.dumps({"status": "completed", "stopped_early": stopped})
    )
    caplog.clear()
    assert resolve_run_dir(str(run_dir), str(tmp_path), []) == str(run_dir)
    assert "has completed: it stopped early (epoch 1), so it trains on until its" in caplog.text


@pytest.mark.parametrize("given", ["paths.output_dir=/x", "+paths.output_dir=/x"])
def test_paths_output_dir_is_refused_however_given(given):
    config = OmegaConf.create({"hydra": {"overrides": {"task": ["seed=0", given]}}})
    with pytest.raises(ConfigError, match=re.escape(f"{given}: paths.output_dir is the run")):
        check_output_dir_not_set(config)


def test_the_run_dir_guard_refuses_paths_output_dir(tmp_path, monkeypatch, capsys):
    """The guard itself makes the check before Hydra writes anything (the CLI test of this needs
    a trained run): without it a new run wrote into the folder given."""
    single_process(monkeypatch)
    config = OmegaConf.create(
        {
            "resume": None,
            "paths": {"log_dir": str(tmp_path)},
            "hydra": {
                "run": {"dir": "unused"},
                "overrides": {"task": [f"paths.output_dir={tmp_path}"], "hydra": []},
            },
        }
    )
    with pytest.raises(SystemExit):
        RunDirGuard().on_run_start(config)
    assert "paths.output_dir is the run's own dir" in capsys.readouterr().err


def guarded_resume(tmp_path, monkeypatch, task=(), hydra=(), max_epochs=3, saved_seed=0):
    """RunDirGuard on `resume=<a stub run>` (its last checkpoint in epoch 1, started with no
    overrides, its saved config that of this command but for `seed`): the guard's own wiring,
    without the training the CLI tests of it need."""
    single_process(monkeypatch)
    run = stub_run(tmp_path / "runs" / "r", "[]\n")
    torch.save({"epoch": 1}, run / "checkpoints" / "last.ckpt")
    settings = {"seed": 0, "trainer": {"max_epochs": max_epochs}}
    saved = {**settings, "seed": saved_seed}
    (run / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(saved))
    overrides = {"task": [f"resume={run}", *task], "hydra": list(hydra)}
    config = {**settings, "resume": str(run), "paths": {"log_dir": str(tmp_path)}}
    config["hydra"] = {"run": {"dir": "unused"}, "overrides": overrides}
    RunDirGuard().on_run_start(OmegaConf.create(config))
    return run


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({}, None),
        ({"hydra": ["hydra.run.dir=elsewhere"]}, "and hydra.run.dir= would put it elsewhere"),
        ({"task": ["model.hidden_size=8"]}, "started with other settings (differing: model."),
        ({"saved_seed": 1}, "the run was made with other config files than today's"),
        ({"max_epochs": 0}, "which trainer.max_epochs=0 ends before"),
    ],
)
def test_the_run_dir_guard_checks_a_resume(tmp_path, monkeypatch, capsys, change, refusal):
    """Each check of `resume=<dir>` is made by the guard itself: deleting its call (or turning
    its condition around) passed every test that does not train first."""
    if refusal is None:
        guarded_resume(tmp_path, monkeypatch)
        return
    with pytest.raises(SystemExit):
        guarded_resume(tmp_path, monkeypatch, **change)
    assert refusal in capsys.readouterr().err


@pytest.mark.parametrize("resume", [None, "", "null", "None"])
def test_the_run_dir_guard_lets_a_new_run_through(tmp_path, monkeypatch, resume):
    """resume=null in any spelling is a new run: nothing to resume, so nothing to compare (read
    as a path, 'None' was a run dir whose config could not be read, and every run stopped)."""
    single_process(monkeypatch)
    overrides = {"task": [], "hydra": []}
    config = {"resume": resume, "paths": {"log_dir": str(tmp_path)}, "seed": 0}
    config["hydra"] = {"run": {"dir": "unused"}, "overrides": overrides}
    RunDirGuard().on_run_start(OmegaConf.create(config))


def test_the_run_dir_guard_offers_resume_for_a_run_dir_given_by_hand(tmp_path, monkeypatch, capsys):
    """A new run given hydra.run.dir=<a run's dir>: train's guard (its config has resume=) says
    how to continue that run instead."""
    single_process(monkeypatch)
    run = stub_run(tmp_path / "runs" / "r", "[]\n")
    config = {
        "resume": None,
        "paths": {"log_dir": str(tmp_path)},
        "hydra": {
            "run": {"dir": str(run)},
            "overrides": {"task": [], "hydra": [f"hydra.run.dir={run}"]},
        },
    }
    with pytest.raises(SystemExit):
        RunDirGuard().on_run_start(OmegaConf.create(config))
    assert f"(drop hydra.run.dir= for a new dir, or resume={run} to continue that run)" in (
        capsys.readouterr().err
    )


def test_a_resume_that_would_train_back_is_refused(tmp_path):
    """Lightning raised 'You restored a checkpoint with current_epoch=2, but you have set
    Trainer(max_epochs=1)' after the run's completed record had been set aside as failed."""
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    torch.save({"epoch": 2}, run_dir / "checkpoints" / "last.ckpt")
    with pytest.raises(
        ConfigError,
        match=r"in epoch 2 \(counting from 0\), which trainer.max_"
        r"epochs=1 ends before: .*set trainer.max_epochs >= 2; to test the run",
    ):
        check_resume_epochs(str(run_dir), 1)
    with pytest.raises(ConfigError, match=r"which trainer.max_epochs=0 ends before"):
        check_resume_epochs(str(run_dir), 0)
    for max_epochs in (2, 3, -1, None):  # Lightning takes these
        check_resume_epochs(str(run_dir), max_epochs)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"")  # train says what is wrong
    check_resume_epochs(str(run_dir), 1)


def test_the_resume_command_offered_keeps_this_commands_epochs(tmp_path):
    """It repeated the first attempt's trainer.max_epochs=1, which a run trained on since has
    passed: the command offered then failed."""
    run_dir = stub_run(tmp_path / "run", "- seed=1\n- trainer.max_epochs=1\n")
    with pytest.raises(ConfigError) as err:
        check_resume(str(run_dir), ["seed=1", "scorer=dot", "trainer.max_epochs=3"])
    assert str(err.value).endswith(
        f"python -m attnexp seed=1 trainer.max_epochs=3 resume={run_dir}"
    )


def test_a_broken_last_checkpoint_is_said_not_a_traceback(tmp_path):
    (tmp_path / "last.ckpt").write_bytes(b"")  # torch: "mmap can only be used with files ..."
    with pytest.raises(ConfigError, match=r"resume=run: .*last.ckpt is not a readable checkpoint"):
        resume_step_of(tmp_path / "last.ckpt", "run")


def test_an_output_folder_that_is_a_file_is_refused(tmp_path):
    """Hydra made these dirs itself and stopped with FileExistsError / NotADirectoryError."""
    (tmp_path / "afile").write_text("x")
    afile = tmp_path / "afile"
    given = OmegaConf.create(
        {
            "hydra": {
                "overrides": {"hydra": [f"hydra.run.dir={afile}"]},
                "run": {"dir": str(afile)},
            },
            "paths": {"log_dir": str(tmp_path)},
        }
    )
    with pytest.raises(ConfigError, match=rf"hydra.run.dir={afile}: {afile} is a file"):
        check_output_root(given, "hydra.run.dir")
    default = OmegaConf.create(
        {"hydra": {"overrides": {"hydra": []}}, "paths": {"log_dir": f"{afile}/outputs"}}
    )
    with pytest.raises(ConfigError, match=rf"paths.log_dir={afile}/outputs: {afile} is a file"):
        check_output_root(default, "hydra.run.dir")
    check_output_root(
        OmegaConf.create({**default, "paths": {"log_dir": str(tmp_path / "new")}}), "x"
    )
    result = run_cli(tmp_path, *TINY, f"hydra.run.dir={afile}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"error: hydra.run.dir={afile}: {afile} is a file" in result.stderr


def test_resume_commands_quote_sweep_job_dirs(tmp_path):
    """Sweep job dirs hold `=` and `,`: Hydra's parser needs such a value quoted."""
    assert override_arg("resume", "outputs/runs/2026-11-22_10-00-00_ab12cd") == (
        "resume=outputs/runs/2026-11-22_10-00-00_ab12cd"
    )
    job = tmp_path / "1_scorer=dot,seed=0"
    assert override_arg("resume", job) == f"\"resume='{job}'\""
    (job / "checkpoints").mkdir(parents=True)
    (job / "checkpoints" / "last.ckpt").write_bytes(b"")
    (job / ".hydra").mkdir()
    (job / ".hydra" / "config.yaml").write_text("seed: 0\n")
    with pytest.raises(ConfigError) as err:
        check_resume(str(job / "checkpoints" / "last.ckpt"), ["seed=0"])
    assert str(err.value).endswith(f"give the run dir, \"resume='{job}'\"")


def ended_pid() -> int:
    """The pid of a process that has already ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_run_is_still_running_only_while_its_lock_is_held(tmp_path):
    """A running record whose writer's pid now names another process (pids are reused) may be
    resumed: whether the run goes on is its lock's to say."""
    started = RunRecord(tmp_path / "started", seed=0, overrides=[])
    started.start()  # a record says who wrote it
    mine = read(tmp_path / "started" / "metrics.json")
    assert (mine["pid"], mine["host"]) == (os.getpid(), platform.node())
    check_not_running(tmp_path / "started", "resume=auto")  # alive pid, but no lock held
    busy = rf"still running \(process {os.getpid()} on "
    with owning(tmp_path / "started", "train"), pytest.raises(ConfigError, match=busy):
        check_not_running(tmp_path / "started", "resume=auto")
    check_not_running(tmp_path / "no-record", "resume=auto")


def test_a_run_still_going_is_not_resumed(finished_run, tmp_path):
    """Two processes must never write one run dir."""
    tmp, run_dir, _ = finished_run
    going = shutil.copytree(run_dir, tmp_path / "outputs" / "runs" / "going")
    saved = going / ".hydra" / "overrides.yaml"  # as if started here: resume=auto compares paths.*
    saved.write_text(saved.read_text().replace(str(tmp), str(tmp_path)))
    record = read(going / "metrics.json")
    record.update(status="running", host=platform.node(), pid=os.getpid())
    (going / "metrics.json").write_text(json.dumps(record))
    with owning(going, "train"):  # the run at work: this test holds its lock
        before = snapshot(going)
        for resume in (going, "auto"):  # auto: the newest run with these overrides is that one
            resumed = run_cli(tmp_path, *TINY, f"resume={resume}")
            assert resumed.returncode == 2, resumed.stderr[-4000:]
            assert f"the run in {going} is still running (process {os.getpid()} on" in (
                resumed.stderr
            )
            assert "Traceback" not in resumed.stderr and snapshot(going) == before


def snapshot(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


def test_only_a_run_with_its_composed_config_holds_the_folders_inside_it(tmp_path):
    """A project folder with a checkpoints/ of its own is no run: a new run may go below it."""
    (tmp_path / "checkpoints").mkdir()
    assert run_holding(tmp_path / "outputs" / "new") is None
    check_new_dir(tmp_path / "outputs" / "new", can_resume=True)
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text("seed: 0\n")
    assert run_holding(tmp_path / "outputs" / "new") == tmp_path
    with pytest.raises(ConfigError) as err:  # evaluate has no resume= to offer
        check_new_dir(tmp_path, can_resume=False)
    assert str(err.value) == (
        f"hydra.run.dir={tmp_path} already holds a run, which this one would overwrite (drop "
        f"hydra.run.dir= for a new dir)"
    )


def test_a_hand_picked_run_dir_holding_other_runs_is_refused(tmp_path):
    """hydra.run.dir=outputs: the new run's record would lie above the runs there, which then
    read as folders inside it (the CLI test of this needs a trained run)."""
    (tmp_path / "runs" / "old").mkdir(parents=True)
    (tmp_path / "runs" / "old" / "metrics.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"is not empty \(1 entries: runs\)"):
        check_new_dir(tmp_path, can_resume=True)
    check_new_dir(tmp_path / "new", can_resume=True)  # a folder that is not there yet


def test_a_finished_run_is_never_overwritten(finished_run):
    tmp, run_dir, _ = finished_run
    before = snapshot(run_dir)
    other = [o for o in TINY if not o.startswith("model.hidden_size=")] + ["model.hidden_size=8"]
    resumed = run_cli(tmp, *other, f"resume={run_dir}")  # settings that do not fit the run
    assert resumed.returncode == 2, resumed.stderr[-4000:]
    assert "differing: model.hidden_size)" in resumed.stderr
    assert "Traceback" not in resumed.stderr
    by_hand = run_cli(tmp, *other, f"hydra.run.dir={run_dir}")  # a new run into its dir
    assert by_hand.returncode == 2 and "already holds a run" in by_hand.stderr
    inside = run_cli(tmp, *other, f"hydra.run.dir={run_dir}/checkpoints")
    assert inside.returncode == 2 and f"lies inside the run {run_dir}" in inside.stderr
    evaluation = run_cli(
        tmp,
        f"ckpt_path={run_dir}",
        f"hydra.run.dir={run_dir}/checkpoints",
        module="attnexp.evaluate",
    )
    assert evaluation.returncode == 2 and "lies inside the run" in evaluation.stderr
    assert "resume=" not in evaluation.stderr  # evaluate has no resume
    runs_root = run_dir.parent  # holds the run: a record there would put the run inside another
    for module in ("attnexp", "attnexp.evaluate"):
        args = other if module == "attnexp" else [f"ckpt_path={run_dir}"]
        parent = run_cli(tmp, *args, f"hydra.run.dir={runs_root}", module=module)
        assert parent.returncode == 2 and "is not empty" in parent.stderr, module
    assert not (runs_root / "metrics.json").exists() and not (runs_root / ".hydra").exists()
    assert snapshot(run_dir) == before


def test_without_checkpoints_and_with_sparse_validation(tmp_path):
    """callbacks=none: no checkpoint, the final weights are tested; an epoch without a
    validation has no val/* in its history row."""
    result = run_cli_in_process(
        tmp_path,
        *TINY,
        "callbacks=none",
        "trainer.max_epochs=2",
        "trainer.check_val_every_n_epoch=2",
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (run_dir,) = (tmp_path / "outputs" / "runs").iterdir()
    record = read(run_dir / "metrics.json")
    assert record["status"] == "completed" and "test/acc" in record["metrics"]
    assert not list(run_dir.rglob("*.ckpt"))
    first, second = record["history"]
    assert not [k for k in first if k.startswith("val/")] and "val/acc" in second


def test_resume_auto_without_an_earlier_run_starts_one(tmp_path):
    result = run_cli_in_process(tmp_path, *TINY, "resume=auto")
    assert result.returncode == 0, result.stderr[-4000:]
    (run_dir,) = (tmp_path / "outputs" / "runs").iterdir()
    assert read(run_dir / "metrics.json")["status"] == "completed"
    assert (run_dir / ".hydra" / "overrides.yaml").is_file()  # so a later resume=auto finds it


def test_seed_null_draws_and_records_a_seed(compose_cfg, tmp_path):
    record = tiny_run(compose_cfg, tmp_path, "trainer.accelerator=cpu", "seed=null")
    assert record["status"] == "completed" and isinstance(record["seed"], int)
    assert f"seed={record['seed']}" in " ".join(record["warnings"])
    # The saved config still says null; the run's data came from the drawn seed, and so must a
    # re-evaluation's test bags.
    assert OmegaConf.load(tmp_path / "run" / ".hydra" / "config.yaml").seed is None
    assert load_run(tmp_path / "run")[0].seed == record["seed"]
    command_line = [f"ckpt_path={tmp_path / 'run'}"]
    cfg = compose_command_cfg("evaluate", command_line)
    evaluated = evaluate(cfg, tmp_path / "eval", command_line)
    assert evaluated["seed"] == record["seed"]
    assert evaluated["overrides"] == command_line  # the evaluation's own, as the report shows it
    assert evaluated["metrics"]["test/acc"] == pytest.approx(record["metrics"]["test/acc"])
    (tmp_path / "run" / "metrics.json").unlink()  # a copied run dir without its record
    with pytest.raises(ConfigError, match=r"ran with seed=null, and its metrics.json records no"):
        evaluate(cfg, tmp_path / "eval2", [])


def test_test_sets_a_model_cannot_read_are_recorded_as_dropped(compose_cfg, tmp_path):
    """bag_mlp reads bags of at most its training size: the larger test bags are skipped, and
    the run's record says so (not only the log)."""
    record = tiny_run(
        compose_cfg,
        tmp_path,
        "model=bag_mlp",
        "data.eval_bag_sizes=[1,4]",
        "trainer.accelerator=cpu",
    )
    assert (
        "data: BagMLP takes at most 3 items: skipping test bags of sizes [4]" in record["warnings"]
    )
    assert "test/acc_bag1" in record["metrics"] and "test/acc_bag4" not in record["metrics"]


def single_process(monkeypatch) -> None:
    """No launcher's rank variables in the environment: a plain single-process run."""
    for key in (
        "LOCAL_RANK",
        "RANK",
        "SLURM_PROCID",
        "PL_GLOBAL_SEED",
        "WORLD_SIZE",
        "SLURM_NTASKS",
    ):
        monkeypatch.delenv(key, raising=False)


@pytest.mark.parametrize("launcher", ["WORLD_SIZE", "SLURM_NTASKS"])
def test_seed_null_is_refused_for_processes_launched_outside_lightning(
    compose_cfg, tmp_path, monkeypatch, launcher
):
    """torchrun / srun start every rank with seed=null: each would draw its own seed."""
    single_process(monkeypatch)
    monkeypatch.setenv(launcher, "2")
    cfg = compose_cfg(*TINY, "seed=null")
    with pytest.raises(ConfigError, match="2 processes of this job .* give seed=<int>"):
        draw_seed(cfg, RunRecord(tmp_path / "run", None, [], write=False))
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("PL_GLOBAL_SEED", "7")  # a rank Lightning launched: rank 0's draw
    draw_seed(cfg, RunRecord(tmp_path / "run", None, [], write=False))
    assert cfg.seed == 7


def test_seed_null_resumes_with_the_seed_the_run_drew(compose_cfg, tmp_path, monkeypatch):
    """A new draw would give the resumed attempt another data split and tokenizer."""
    single_process(monkeypatch)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.json").write_text(json.dumps({"status": "failed", "seed": 1234}))
    record = RunRecord(run_dir, None, ["seed=null"])
    record.start()  # the interrupted attempt's record becomes metrics.attempt1.json
    cfg = compose_cfg(*TINY, "seed=null")
    draw_seed(cfg, record)
    assert cfg.seed == 1234 and read(run_dir / "metrics.json")["seed"] == 1234


def test_same_seed_same_metrics(compose_cfg, tmp_path):
    (tmp_path / "data").mkdir()
    overrides = [*TINY, "trainer.accelerator=cpu", "logger=csv", "data.eval_variable_max=0"]
    runs = [train_in_process(compose_cfg(*overrides), tmp_path / f"run{i}") for i in range(2)]
    assert runs[0] == runs[1]
    other = train_in_process(compose_cfg(*overrides, "seed=1"), tmp_path / "run_seed1")
    assert other != runs[0]


def built(compose_cfg, *overrides):
    cfg = compose_cfg(*overrides)
    return build(cfg, dict(cfg.hydra.runtime.choices), overrides=list(overrides))


@pytest.mark.parametrize(
    "overrides,error,match",
    [
        (["model=bag_atn"], MissingConfigException, r"Could not find 'model/bag_atn'"),
        (
            ["scorer=dott"],
            MissingConfigException,
            r"(?s)Could not find 'scorer/dott'.*additive.*bilinear",
        ),
        (["trainer.max_epoch=1"], ConfigCompositionException, r"trainer.max_epoch"),
    ],
)
def test_unknown_options_and_keys(compose_cfg, overrides, error, match):
    with pytest.raises(error, match=match):
        compose_cfg(*overrides)


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["data.bag_size=0"], r"data.bag_size=0 must be a whole number >= 1"),
        (["data.num_eval_bags=0"], r"data.num_eval_bags=0 must be a whole number >= 1"),
        (["data.eval_bag_sizes=[0,3]"], r"data.eval_bag_sizes=\[0, 3\] must be a non-empty list"),
        (["model=bag_mlp", "scorer=dot"], r"model=bag_mlp has no attention scorer, so scorer=dot"),
        (
            ["model=bag_attn", "data=imdb"],
            r"model=bag_attn reads 'bags' batches but data=imdb provides",
        ),
        (
            ["model.backbone=resnet"],
            r"^model.backbone='resnet' is not one of mlp, conv \(set model.backbone=\.\.\.\)$",
        ),
        (
            ["model.attention=simple", "scorer=dot"],
            r"model.attention=simple scores each item on its own, so scorer=dot has no effect",
        ),
        (["data.source=local"], r"data folder .*mnist does not exist"),
        # the choices come from conf/scorer/ (a new yaml joins them), not from a list in the model
        (
            ["model=lstm_attn", "~scorer"],
            r"model=lstm_attn needs an attention scorer \(set scorer=..., one of additive, "
            r"bilinear, (\w+, )*dot, scaled_dot\)",
        ),
        (["model.scorer=null"], r"model=bag_attn needs an attention scorer"),
        # was wrapped in Hydra's InstantiationException (the task was not built as the rest)
        (["task.weight_decay=-1"], r"^task.weight_decay=-1 must be a number >= 0"),
        # was Hydra's "Error in call to target ... unexpected keyword argument 'new_key'"
        (
            ["+model.new_key=3"],
            r"^model.new_key: attnexp.models.bag.BagAttention takes no argument 'new_key' \(it "
            r"takes: .*hidden_size.*\); a key added with \+ is passed to it",
        ),
    ],
)
def test_config_errors(compose_cfg, overrides, match):
    with pytest.raises(ConfigError, match=match):
        built(compose_cfg, *overrides)


@pytest.mark.parametrize(
    "override,match",
    [
        # declared in attnexp.schema: said as its range, by the command line and here alike
        ("trainer.devices=0", r"^trainer.devices=0 must be a whole number >= 1 or "),
        ("trainer.limit_val_batches=-1", r"^trainer.limit_val_batches=-1 must be a whole number"),
        # sizes of the model and its scorer: the schema's, not the constructors'
        ("model.hidden_size=0", r"^model.hidden_size=0 must be a whole number >= 1"),
        ("scorer.attn_dim=0", r"^scorer.attn_dim=0 must be a whole number >= 1"),
        (
            "trainer.strategy=foo",
            r"^train: Lightning refuses a trainer.\* setting: .*foo",
        ),
    ],
)
def test_trainer_settings_lightning_refuses_are_said_before_loading(
    compose_cfg, tmp_path, monkeypatch, override, match
):
    """Were Hydra's 'Error in call to target ...Trainer' (no key to set), after the data load."""
    import attnexp.runner.train

    def build(*args, **kwargs):
        raise AssertionError("the data were loaded before the trainer settings were checked")

    monkeypatch.setattr(attnexp.runner.train, "build", build)
    with pytest.raises(ConfigError, match=match):
        tiny_run(compose_cfg, tmp_path, "trainer.accelerator=cpu", override)


@pytest.mark.parametrize(
    "override,match",
    [
        (
            "callbacks.model_checkpoint.mode=foo",
            r"^train: Lightning refuses a callbacks.model_checkpoint.\* setting: .*`mode` can be",
        ),
        (
            "callbacks.model_checkpoint.save_top_k=-2",
            r"^callbacks.model_checkpoint.save_top_k=-2 must be a whole number >= -1",
        ),
        (
            "callbacks.lr_monitor.logging_interval=foo",
            r"^train: Lightning refuses a callbacks.lr_monitor.\* setting: .*logging_interval",
        ),
    ],
)
def test_callback_settings_lightning_refuses_name_the_callback(
    compose_cfg, tmp_path, override, match
):
    """Were Hydra's 'Error in call to target ...ModelCheckpoint' with no key to set."""
    with pytest.raises(ConfigError, match=match):
        tiny_run(compose_cfg, tmp_path, override)


@pytest.mark.parametrize(
    "callback, overrides",
    [("model_checkpoint", []), ("early_stopping", ["callbacks=early_stopping"])],
)
def test_a_monitor_that_names_no_metric_gets_lightnings_error_with_the_setting_logged(
    compose_cfg, tmp_path, caplog, callback, overrides
):
    """Lightning finds it at the first validation and says which metrics there are; its error
    goes on as it is, and the log line before it names the monitor settings."""
    with pytest.raises(Exception, match="val/accc") as err:
        tiny_run(compose_cfg, tmp_path, *overrides, f"callbacks.{callback}.monitor=val/accc")
    assert not isinstance(err.value, ConfigError) and "val/acc" in str(err.value)
    (line,) = [r.getMessage() for r in caplog.records if "inside Lightning's fit" in r.getMessage()]
    assert f"callbacks.{callback}.monitor=val/accc" in line


def test_early_stopping_ends_the_run_and_the_record_says_why(compose_cfg, tmp_path):
    """callbacks=early_stopping: val/acc cannot rise by min_delta=1, so the second epoch's
    validation is one without improvement, and patience=1 ends the run there (of 4 epochs).
    The best checkpoint (epoch 0's) is still tested."""
    record = tiny_run(
        compose_cfg,
        tmp_path,
        "trainer.max_epochs=4",
        "callbacks=early_stopping",
        "callbacks.early_stopping.patience=1",
        "callbacks.early_stopping.min_delta=1.0",
    )
    assert record["status"] == "completed" and "test/acc" in record["metrics"]
    assert [row["epoch"] for row in record["history"]] == [0, 1]
    stopped = record["stopped_early"]
    assert (stopped["epoch"], stopped["step"]) == (1, 4)  # 2 batches an epoch
    assert stopped["reason"].startswith("Monitored metric val/acc did not improve in the last 1")
    assert checkpoint_step(tmp_path / "run" / record["best_ckpt"]) == 2


def test_early_stopping_after_every_batch_counts_validations(compose_cfg, tmp_path):
    """trainer.val_check_interval=1 validates after every batch, which Lightning takes for 1.0:
    EarlyStopping then checked at epoch ends only, and patience=1 let the run train a second
    epoch after the validation (step 2) that did not improve."""
    record = tiny_run(
        compose_cfg,
        tmp_path,
        "trainer.max_epochs=4",
        "trainer.val_check_interval=1",
        "callbacks=early_stopping",
        "callbacks.early_stopping.patience=1",
        "callbacks.early_stopping.min_delta=1.0",
    )
    assert [row["step"] for row in record["validations"]] == [1, 2]
    assert (record["stopped_early"]["epoch"], record["stopped_early"]["step"]) == (0, 2)


def test_simple_attention_drops_the_default_scorer(compose_cfg):
    cfg = compose_cfg("model.attention=simple")
    choices = dict(cfg.hydra.runtime.choices)
    _, task = build(cfg, choices)
    assert cfg.scorer is None and choices["scorer"] is None  # the record claims no scorer
    assert task.model.pool.scorer.needs_query is False


def test_missing_and_corrupt_data_files(compose_cfg, tmp_path):
    folder = write_mnist(tmp_path / "data", num_train=40, num_test=20)
    (folder / FILES["train"][0]).write_bytes(b"garbage")
    with pytest.raises(
        ConfigError, match="train-images-idx3-ubyte.gz is not a readable gzip IDX file"
    ):
        built(compose_cfg)
    (folder / FILES["train"][0]).unlink()
    with pytest.raises(ConfigError, match="missing train-images-idx3-ubyte.gz"):
        built(compose_cfg)


def test_training_length_keys_need_no_plus(compose_cfg, tmp_path):
    """Lightning users stop a run by epochs or by steps: both keys are in every trainer config."""
    for trainer in ("default", "cpu"):
        cfg = compose_cfg(f"trainer={trainer}", "trainer.max_epochs=2", "trainer.max_steps=7")
        settings = lightning_settings(cfg.trainer)  # as the runner builds it: less `compile`
        built = instantiate(
            settings, default_root_dir=str(tmp_path), logger=False, enable_checkpointing=False
        )
        assert (built.max_epochs, built.max_steps) == (2, 7)


def test_data_dir_that_does_not_exist(compose_cfg, tmp_path):
    cfg = compose_cfg("trainer.max_epochs=1")  # compose_cfg sets paths.data_dir=<tmp>/data: absent
    # the folders named come from the DataModules of conf/data/ (a new dataset joins them)
    with pytest.raises(
        ConfigError,
        match=r"paths.data_dir=.*/data does not exist \(give a folder holding fra-eng/, imdb/, "
        r"lcqmc/, mnist/, multi30k/,",
    ):
        train_in_process(cfg, tmp_path / "run")
    check_data_dir(str(tmp_path / "absent"), ["trainer.max_epochs=1"])  # the default dir: no error
    (tmp_path / "afile").write_text("x")  # said "does not exist"
    with pytest.raises(ConfigError, match=r"paths.data_dir=.*afile is a file, not a folder"):
        check_data_dir(str(tmp_path / "afile"), [f"paths.data_dir={tmp_path}/afile"])


class Worsening(pl.LightningModule):
    """val/acc falls at every validation: the first checkpoint stays the best."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))

    def training_step(self, batch, batch_idx):
        return self.w * batch.sum()

    def validation_step(self, batch, batch_idx):
        self.log("val/acc", 1.0 / (1 + self.global_step))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_last_ckpt_is_the_latest_state_not_the_best(tmp_path):
    """resume= continues from last.ckpt: it must hold the latest validation's state, also when
    val/acc did not improve there (Lightning's save_last writes it only when it does)."""
    callbacks = OmegaConf.load(CONF_DIR / "callbacks" / "default.yaml")
    checkpoints = [callbacks.model_checkpoint, callbacks.last_checkpoint]
    for cfg in checkpoints:
        cfg.dirpath = str(tmp_path)
    best, last = (instantiate(cfg) for cfg in checkpoints)
    data = DataLoader(torch.ones(4, 2), batch_size=2)
    trainer = pl.Trainer(
        max_epochs=3,
        callbacks=[best, last],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Worsening(), train_dataloaders=data, val_dataloaders=data)
    assert checkpoint_step(str(tmp_path / "last.ckpt")) == 6  # 3 epochs of 2 steps
    assert checkpoint_step(best.best_model_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["last.ckpt", Path(best.best_model_path).name]
    )


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["seed=abc"], r"seed='abc' must be a whole number"),
        (["seed=-1"], r"seed=-1 must be a whole number from 0 to 4294967295"),
        (["data.seed=-1"], r"data.seed=-1 must be a whole number from 0"),  # failed at epoch 1
        (
            ["trainer.max_epochs=abc"],
            r"trainer.max_epochs='abc' must be a whole number >= 1 \(-1: no limit\)",
        ),
        (["optimizer.lr=-1"], r"optimizer.lr=-1 must be a number > 0"),
        (["optimizer.lr=0"], r"optimizer.lr=0 must be a number > 0"),  # trains nothing
        # Lightning trains nothing on these, and the run tested its untrained model (rc 0)
        (["trainer.max_epochs=0"], r"trainer.max_epochs=0 trains nothing"),
        (["trainer.limit_train_batches=0"], r"trainer.limit_train_batches=0 trains nothing"),
        (["trainer.max_steps=0"], r"trainer.max_steps=0 trains nothing"),
        # ZeroDivisionError inside Lightning's fit loop
        (
            ["trainer.val_check_interval=0"],
            r"trainer.val_check_interval=0 must be a whole number >= 1 or a number > 0 and <= 1",
        ),
        (
            ["trainer.val_check_interval=0.0"],
            r"val_check_interval=0.0 must be a whole number >= 1 or",
        ),
        (["trainer.check_val_every_n_epoch=0"], r"check_val_every_n_epoch=0 must be a whole"),
        # Lightning's error on the monitor, said as model_checkpoint's with val/acc as the fix
        (
            ["callbacks=early_stopping", "trainer.limit_val_batches=0"],
            r"^callbacks.early_stopping stops training on val/acc at validations, and "
            r"trainer.limit_val_batches=0 runs none",
        ),
        (["trainer=cpu", "trainer.precision=16-mixed"], r"16-mixed: float16 autocast runs on GPUs"),
        pytest.param(  # trainer=default's accelerator=auto, on a machine without CUDA
            ["trainer.precision=16-mixed"],
            r"trainer.precision=16-mixed: .*trainer.accelerator=auto runs on the CPU here",
            marks=NO_CUDA,
        ),
        # ValueError "SyncBatchNorm layers only work with GPU modules" from each spawned rank
        (
            ["trainer=ddp", "trainer.accelerator=cpu"],
            r"trainer.sync_batchnorm=true needs GPUs, .*use trainer=ddp_cpu for DDP on CPU",
        ),
        pytest.param(
            ["trainer=ddp", "trainer.accelerator=auto", "trainer.precision=32-true"],
            r"trainer.sync_batchnorm=true needs GPUs, and trainer.accelerator=auto runs on the CPU",
            marks=NO_CUDA,
        ),
        # RuntimeError from torch.Generator.manual_seed, after loading the data
        (["model=transformer", "data.split_seed=abc"], r"data.split_seed='abc' must be a whole"),
        (
            ["experiment=imdb/chapter_mean", "trainer.limit_train_batches=5"],
            r"trainer.val_check_interval=10 validates every 10 training batches, but "
            r"trainer.limit_train_batches=5",
        ),
    ],
)
def test_settings_refused_before_training(compose_cfg, overrides, match):
    """Lightning and torch would stop on these with tracebacks from inside fit()."""
    with pytest.raises(ConfigError, match=match):
        check_trainer_settings(compose_cfg(*overrides))


def test_validation_after_every_batch_saves_the_best_checkpoint(tmp_path):
    """Lightning read val_check_interval=1 (every batch) as 1.0 (once per epoch) and saved
    checkpoints at the epoch's end only: the run tested the last weights, not the best."""
    result = run_cli_in_process(
        tmp_path, *TINY, "trainer.limit_train_batches=4", "trainer.val_check_interval=1"
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (run_dir,) = (tmp_path / "outputs" / "runs").iterdir()
    record = read(run_dir / "metrics.json")
    accs = [v["val/acc"] for v in record["validations"]]
    steps = [v["step"] for v in record["validations"]]
    assert steps == [1, 2, 3, 4]
    best = steps[accs.index(max(accs))]
    assert best < 4, f"seed 0's best validation is the last ({accs}): pick a case that tells"
    assert checkpoint_step(run_dir / record["best_ckpt"]) == best
    assert record["metrics"]["val/acc_best"] == max(accs)
    # without validation, Lightning's own rule (save at the epoch's end) is the one that saves
    result = run_cli_in_process(
        tmp_path, *TINY, "trainer.limit_val_batches=0", "trainer.val_check_interval=1"
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (run_dir,) = set((tmp_path / "outputs" / "runs").iterdir()) - {run_dir}
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()


def test_debug_limit_works_with_step_validation(compose_cfg):
    check_trainer_settings(compose_cfg("experiment=imdb/chapter_mean", "debug=limit"))
    # the limits of the settings refused above are settings a run may take
    check_trainer_settings(
        compose_cfg("experiment=imdb/chapter_mean", "trainer.limit_train_batches=10")
    )
    check_trainer_settings(
        compose_cfg("trainer.max_epochs=-1", "trainer.max_steps=5")
    )  # -1: no limit


@NO_CUDA
def test_gpu_trainer_without_a_gpu(compose_cfg):
    with pytest.raises(ConfigError, match=r"trainer.accelerator=gpu: this machine sees no CUDA"):
        check_trainer_settings(compose_cfg("trainer=gpu"))
    with pytest.raises(ConfigError, match=r"no CUDA device \(use trainer=cpu, trainer=ddp_cpu"):
        check_trainer_settings(compose_cfg("trainer=ddp"))  # several processes on CPU: ddp_cpu


@pytest.mark.parametrize(
    ("target", "setting"),
    [
        ("pytorch_lightning.loggers.TensorBoardLogger", {"purge_step": 7}),
        ("attnexp.tasks.loggers.CSVLogger", {"purge_step": 7}),
        ("pytorch_lightning.loggers.WandbLogger", {}),  # not resumable: left as configured
        ("attnexp.runner.train.draw_seed", {}),  # a function (a logger factory, say), not a class
        ("nowhere.Logger", {}),  # instantiate() says what is wrong
    ],
)
def test_purge_setting_only_for_the_resumable_loggers(target, setting):
    assert purge_setting(OmegaConf.create({"_target_": target}), 7) == setting


def test_device_name_counts_processes_only_when_there_are_several():
    """The record's `device`: a multi-process run says how many ranks shared the work."""
    trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cpu")))
    assert device_name(SimpleNamespace(**vars(trainer), world_size=1)) == "cpu"
    assert device_name(SimpleNamespace(**vars(trainer), world_size=2)) == "cpu x2"


def test_the_validation_at_a_step_is_the_last_one_there():
    """The record's val/* for the tested checkpoint: those of the last validation at its step
    (a record may hold two there, e.g. an interrupted attempt's and its resumed run's)."""
    record = SimpleNamespace(data={"validations": [
        {"epoch": 0, "step": 4, "val/acc": 0.5, "train/loss": 0.1},
        {"epoch": 0, "step": 4, "val/acc": 0.6},
        {"epoch": 1, "step": 8, "val/acc": 0.7},
    ]})  # fmt: skip
    assert validation_at(record, 4) == {"val/acc": 0.6}
    assert validation_at(record, 8) == {"val/acc": 0.7} and validation_at(record, 5) is None


def test_a_best_checkpoint_without_its_validation_keeps_the_last_and_says_so():
    notes = []
    metrics = with_val_of(
        {"val/acc": 0.4, "test/acc": 0.6},
        None,
        {"val/acc": 0.5},
        SimpleNamespace(warn=notes.append),
    )
    assert metrics == {"test/acc": 0.6, "val/acc_last": 0.5}
    assert notes == ["no validation recorded at the best checkpoint's step: only val/*_last"]


def test_only_one_number_metrics_are_recorded():
    metrics = {"val/acc": torch.tensor(0.5), "val/per_class": torch.tensor([0.2, 0.8]), "x": 1.0}
    assert scalar_metrics(metrics) == {"val/acc": 0.5}


def test_the_best_score_is_the_callbacks_else_the_checkpoints_own(tmp_path):
    """ddp_spawn hands the main process the best path only: the score is in the checkpoint."""
    best = tmp_path / "best.ckpt"
    assert best_score(SimpleNamespace(best_model_score=torch.tensor(0.25)), str(best)) == 0.25
    state = {"EarlyStopping": {}, "ModelCheckpoint{'monitor': 'val/acc'}": {}}
    torch.save({"callbacks": state}, best)
    with pytest.raises(RuntimeError, match=f"no best_model_score in {re.escape(str(best))}"):
        best_score(SimpleNamespace(best_model_score=None), str(best))
    state["ModelCheckpoint{'monitor': 'val/acc'}"]["best_model_score"] = torch.tensor(0.75)
    torch.save({"callbacks": state}, best)
    assert best_score(SimpleNamespace(best_model_score=None), str(best)) == 0.75


def test_the_hparams_tab_holds_what_defines_the_experiment():
    cfg = OmegaConf.create(
        {
            "seed": 0,
            "data": {"batch_size": 4, "num_workers": 2},
            "model": {"hidden_size": 8, "scorer": {"_target_": "Dot"}},
            "task": {"optimizer": {"lr": 0.1}, "label_smoothing": 0.0},
            "trainer": {"max_epochs": 1, "default_root_dir": "/x", "enable_progress_bar": True},
            "paths": {"log_dir": "/logs"},
        }
    )
    hparams = run_hparams(cfg, {"model": "bag_attn"}, "sample")
    assert flatten_hparams(hparams) == {
        "seed": 0,
        "data.batch_size": 4,
        "model.hidden_size": 8,
        "task.label_smoothing": 0.0,
        "trainer.max_epochs": 1,
        "choice.model": "bag_attn",
        "data_source": "sample",
    }
    assert flatten_hparams({"a": {}, "b": [1, 2], "c": None}) == {"b": "[1, 2]", "c": "None"}


def test_a_resume_from_a_record_without_its_data_goes_on(tmp_path):
    """A record from before data_source was kept says nothing against the data read now."""
    now = SimpleNamespace(source="sample", fingerprints={"train": "ab"})
    check_resume_data({}, now, str(tmp_path), "run")
    with pytest.raises(ConfigError, match=r"trained on local data, .*\(give its data\)$"):
        check_resume_data({"data_source": "local"}, now, str(tmp_path), "run")
    with pytest.raises(ConfigError, match=r"\(give paths.data_dir=/d\)$"):
        check_resume_data({"data_source": "local", "data_dir": "/d"}, now, str(tmp_path), "run")


def test_one_line_marks_only_a_cut_reason():
    assert one_line(RuntimeError("size mismatch\n  for a")) == "size mismatch for a"
    assert one_line(RuntimeError("size mismatch\n for a\n for b")) == "size mismatch for a ..."
