"""`python -m attnexp`'s entry point: what Hydra answers alone, the summary, the exit status; and
what evaluate's and predict's command lines answer alone."""

import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import RUN_MODULES, run_counting_imports

from attnexp.cli import train
from attnexp.cli.train import missing_sweeper, run_summary

MATPLOTLIB = {"matplotlib"}  # the entry point draws nothing either


def run_entry(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    return run_counting_imports(
        ["-m", "attnexp", *args, f"paths.log_dir={tmp_path}/outputs"], tmp_path
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--cfg", "job", "model=lstm_attn", "scorer=dot"],
        ["--help"],
        ["-m", "--cfg", "job", "model=lstm_attn", "scorer=dot,additive"],
    ],
    ids=["cfg", "help", "multirun-cfg"],
)
def test_what_hydra_answers_alone_imports_no_torch(tmp_path, args):
    result, imported = run_entry(tmp_path, *args)
    assert "hydra" in imported and "attnexp" in imported  # the import lines were read
    assert not imported & (RUN_MODULES | MATPLOTLIB), result.stderr
    if args[0] == "--help":
        assert result.returncode == 0 and result.stdout.startswith("train is powered by Hydra")
    elif args[0] == "--cfg":
        assert result.returncode == 0, result.stderr
        assert "_target_: attnexp.modules.scorers.DotScorer" in result.stdout
    else:  # Hydra's own refusal: one of --cfg and -m
        assert result.returncode == 1 and "Only one of --run, --multirun" in result.stderr


def test_a_typo_in_a_key_is_named_before_torch_is_imported(tmp_path):
    result, imported = run_entry(tmp_path, "trainer.max_epoch=3")
    assert result.returncode == 2
    assert "did you mean trainer.max_epochs" in result.stderr
    assert not imported & (RUN_MODULES | MATPLOTLIB)


def test_a_run_imports_its_training_code(tmp_path):
    """The counterpart: the import lines above do name torch once a run starts (a bad
    setting found by the run's own checks, so nothing trains)."""
    result, imported = run_entry(tmp_path, "data.source=nowhere")
    assert result.returncode == 2 and "data.source 'nowhere'" in result.stderr
    assert {"torch", "pytorch_lightning"} <= imported


@pytest.mark.parametrize(
    ("command", "args", "says"),
    [
        ("evaluate", ["--help"], "evaluate is powered by Hydra"),
        ("evaluate", ["ckpt_pth=x"], "ckpt_pth=x is not a setting of evaluate"),
        ("predict", ["--help"], "Settings (key=value; conf/predict.yaml)"),
        ("predict", ["ckpt_pth=x", "text=good"], "ckpt_pth=x is not a setting of predict"),
        ("explain", ["--help"], "Settings (key=value; conf/explain.yaml)"),
        ("explain", ["explain.n_exampls=3"], "explain.n_exampls=3 is not a setting of explain"),
        ("explain", ["ckpt_path=x", "-m"], "explain takes key=value arguments only, not -m"),
    ],
    ids=[
        "evaluate-help", "evaluate-typo", "predict-help", "predict-typo", "explain-help",
        "explain-typo", "explain-flag",
    ],
)  # fmt: skip
def test_evaluate_predict_and_explain_answer_help_and_typos_without_torch(
    tmp_path, command, args, says
):
    result, imported = run_counting_imports(["-m", f"attnexp.{command}", *args], tmp_path)
    assert "attnexp" in imported  # the import lines were read
    assert not imported & (RUN_MODULES | MATPLOTLIB), result.stderr
    assert result.returncode == (0 if args == ["--help"] else 2)
    assert says in result.stdout + result.stderr


@pytest.mark.parametrize("command", ["evaluate", "predict", "explain"])
def test_a_checkpoint_that_is_not_there_is_said_before_torch_loads(tmp_path, command):
    result, imported = run_counting_imports(
        ["-m", f"attnexp.{command}", f"ckpt_path={tmp_path}/nowhere", f"paths.log_dir={tmp_path}"],
        tmp_path,
    )
    assert result.returncode == 2 and "nowhere does not exist" in result.stderr
    assert not imported & RUN_MODULES
    assert not (tmp_path / "evals").exists() and not (tmp_path / "predictions").exists()


def test_the_console_script_is_the_same_entry(tmp_path):
    """pyproject's [project.scripts] `attnexp`, as `pip install` wrote it into the environment."""
    script = Path(sys.executable).with_name("attnexp")
    if not script.is_file():
        pytest.skip(f"no {script}: attnexp is not pip-installed into this environment")
    result = subprocess.run(
        [str(script), "--cfg", "job", "model=bag_attn", "scorer=dot"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "_target_: attnexp.modules.scorers.DotScorer" in result.stdout


def test_the_summary_shows_the_test_and_validation_accuracies_in_natural_order():
    metrics = {"test/acc_bag10": 0.7, "test/acc_bag2": 0.9, "val/acc": 0.8, "val/loss": 0.3}
    assert run_summary(metrics, "runs/x").splitlines() == [
        "run dir: runs/x",
        "  test/acc_bag2            0.9000",
        "  test/acc_bag10           0.7000",
        "  val/acc                  0.8000",
    ]


def test_a_search_given_with_a_plus_is_said_without_its_sweeper(monkeypatch):
    monkeypatch.setattr(train, "plugin_installed", lambda module: False)
    (message,) = missing_sweeper(["seed=1", "+hparams_search=bag_optuna"])
    assert message.startswith("+hparams_search=bag_optuna runs on Optuna, which is not installed")
    assert missing_sweeper(["seed=1"]) == []


def test_a_sweep_of_many_failed_jobs_never_exits_with_status_0(monkeypatch, capsys):
    """Exit statuses wrap at 256: 256 failed jobs would read as success."""
    monkeypatch.setattr(train, "main", lambda: None)
    monkeypatch.setattr(train, "FAILED_JOBS", [f"job{i}" for i in range(256)])
    with pytest.raises(SystemExit) as end:
        train.cli()
    assert end.value.code == 100
    assert "256 job(s) failed:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "key", "says"),
    [
        ("attnexp", "resume", "no checkpoints/last.ckpt in"),
        ("attnexp.evaluate", "ckpt_path", "does not exist"),
        ("attnexp.predict", "ckpt_path", "does not exist"),
    ],
)
def test_a_sweep_jobs_dir_is_taken_unquoted(tmp_path, command, key, says):
    """A job dir holds `=` and `,`, which Hydra parses only quoted ("mismatched input '='"):
    each command takes it as the path it is."""
    job = tmp_path / "sweep" / "1_scorer=dot,seed=0"
    result, _ = run_counting_imports(
        ["-m", command, f"{key}={job}", f"paths.log_dir={tmp_path}/outputs"], tmp_path
    )
    assert result.returncode == 2, result.stderr
    assert says in result.stderr and str(job) in result.stderr, result.stderr


@pytest.mark.parametrize("command", ["attnexp.evaluate", "attnexp.predict"])
def test_overrides_without_brackets_is_told_the_list_to_write(tmp_path, command):
    """`overrides=data.batch_size=512` holds '=' but is no path: left to the commands' own hint."""
    result, _ = run_counting_imports(
        ["-m", command, f"ckpt_path={tmp_path}/run", "overrides=data.batch_size=512"], tmp_path
    )
    assert result.returncode == 2, result.stderr
    assert """write 'overrides=["data.batch_size=512"]'""" in result.stderr, result.stderr


def test_a_job_dir_named_by_a_swept_list_is_taken_unquoted(tmp_path):
    """A sweep over a list (`-m data.eval_bag_sizes=[1,3],[1,5]`) names its jobs' dirs with the
    brackets kept (`0_eval_bag_sizes=[1,3]`): such a dir is a path too."""
    job = tmp_path / "sweep" / "0_eval_bag_sizes=[1,3]"
    result, _ = run_counting_imports(
        ["-m", "attnexp.evaluate", f"ckpt_path={job}", f"paths.log_dir={tmp_path}/outputs"],
        tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert f"ckpt_path={job} does not exist" in result.stderr, result.stderr
