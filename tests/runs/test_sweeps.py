"""Sweeps: a failing job is recorded and the sweep goes on; readable job names; sweep configs compose."""

import csv
import json

import pytest
from cli_helpers import TINY, run_cli
from conftest import CONF_DIR
from hydra.utils import get_class
from omegaconf import OmegaConf

from attnexp.cli.train import plugin_installed
from attnexp.errors import ConfigError
from attnexp.runs import report, sweeps
from attnexp.runs.layout import write_run_config
from attnexp.runs.search import SWEEPER_TARGET
from attnexp.runs.sweeps import FailedJobs, SweepDirGuard, check_strategy, sweep_subdir, swept_keys


def test_sweep_with_a_failing_job_then_report(tmp_path):
    # data.variable=true with data.min_bag_size=5 > bag_size=3 is a ConfigError: job 1 fails.
    result = run_cli(tmp_path, "-m", "data.variable=true", "data.min_bag_size=1,5", *TINY)
    assert result.returncode == 1, result.stderr[-4000:]  # the exit status counts failed jobs
    assert "1 job(s) failed" in result.stderr
    output = result.stdout + result.stderr  # the log goes to stdout
    assert "job 1 failed; the sweep goes on. error: " in output  # a user error: no traceback
    assert "Traceback" not in output
    (sweep_dir,) = (tmp_path / "outputs" / "multiruns").iterdir()
    jobs = sorted(p.name for p in sweep_dir.iterdir() if p.is_dir())
    assert [j.split("_", 1)[0] for j in jobs] == ["0", "1"]
    assert all("trainer" not in j and "min_bag_size=" in j for j in jobs)  # only the swept keys

    written = report.write_report(sweep_dir)
    rows = list(csv.DictReader(written["csv"].open()))
    assert len(rows) == 2
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["run"].startswith("1_")
    assert "min_bag_size" in failed[0]["error"]
    for row in rows:
        record = json.loads((sweep_dir / row["run"] / "metrics.json").read_text())
        assert record["status"] == row["status"]
        if row["status"] == "completed":
            assert record["metrics"]["test/acc"] > 0
            for key, value in record["metrics"].items():
                assert float(row[key]) == pytest.approx(value, abs=0, rel=1e-12), key
    assert "**FAILED**" in written["markdown"].read_text()

    # The same sweep dir again: refused before anything is written, the earlier jobs untouched.
    before = {p: p.stat().st_mtime_ns for p in sweep_dir.rglob("*")}
    again = run_cli(tmp_path, "-m", "data.variable=false", f"hydra.sweep.dir={sweep_dir}", *TINY)
    assert again.returncode == 2, again.stderr[-4000:]
    assert f"error: hydra.sweep.dir={sweep_dir} holds an earlier sweep" in again.stderr
    assert {p: p.stat().st_mtime_ns for p in sweep_dir.rglob("*")} == before


def test_jobs_never_share_a_dir(tmp_path):
    """A hydra.sweep.subdir= that names two jobs alike: the second would write its config,
    checkpoints and record over the first's, so it is refused and the first's are kept."""
    sweep = tmp_path / "sweep"
    result = run_cli(
        tmp_path, "-m", "seed=0,1", *TINY, f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=same"
    )
    assert result.returncode == 1, result.stderr[-4000:]
    output = result.stdout + result.stderr  # the log goes to stdout
    assert f"hydra.sweep.subdir=same puts job 1 into {sweep / 'same'}, which holds" in output
    job = sweep / "same"
    assert json.loads((job / "metrics.json").read_text())["seed"] == 0
    assert "seed=0" in (job / ".hydra" / "overrides.yaml").read_text()
    assert not list(job.glob("metrics.attempt*")) and not list(job.glob(".hydra/resume_*"))
    assert len(list((job / "checkpoints").glob("*.ckpt"))) == 2  # job 0's best and last


def test_a_resumed_run_writes_its_config_beside_the_original(tmp_path):
    """The run writes .hydra/ itself, under its lock: the first attempt's files stay, a resumed
    attempt's go into .hydra/resume_<time>/."""
    hydra = OmegaConf.create({"run": {"dir": str(tmp_path)}})
    first = write_run_config(tmp_path, OmegaConf.create({"seed": 0}), hydra, ["seed=0"])
    assert first == tmp_path / ".hydra"
    assert OmegaConf.load(first / "config.yaml") == {"seed": 0}
    assert OmegaConf.load(first / "hydra.yaml").hydra.run.dir == str(tmp_path)
    assert list(OmegaConf.load(first / "overrides.yaml")) == ["seed=0"]
    again = write_run_config(tmp_path, OmegaConf.create({"seed": 1}), hydra, ["seed=1"])
    assert again.parent == first and again.name.startswith("resume_")
    assert OmegaConf.load(first / "config.yaml") == {"seed": 0}  # the original is kept


def test_sweep_subdir_names_only_the_swept_overrides(tmp_path):
    OmegaConf.save(
        {
            "hydra": {
                "overrides": {"task": ["seed=0,1", "trainer.max_epochs=2", "model.hidden_size=8"]},
                "sweeper": {"params": {"+experiment/bag": "mlp,dot"}},
            }
        },
        tmp_path / "multirun.yaml",
    )
    assert swept_keys(tmp_path) == {"seed", "experiment/bag"}
    job = ["seed=1", "trainer.max_epochs=2", "model.hidden_size=8", "+experiment/bag=dot"]
    assert sweep_subdir(3, str(tmp_path), job, "fallback") == "3_seed=1,bag=dot"
    # no multirun.yaml (a sweep started without SweepDirGuard): Hydra's override_dirname
    assert sweep_subdir(0, str(tmp_path / "x"), job, "all,of=them") == "0_all,of=them"
    long = sweep_subdir(0, str(tmp_path), ["seed=" + "9" * 400], "")
    assert len(long) < 200
    # two long names alike up to the cut still name two dirs
    assert long != sweep_subdir(0, str(tmp_path), ["seed=" + "9" * 399 + "8"], "")
    # a swept value with spaces, quotes or wildcards names a dir a shell can type
    quoted = sweep_subdir(2, str(tmp_path), ["seed='a b*?'"], "")
    assert quoted.startswith("2_seed=") and not set(quoted) & set(" '\"*?<>|")
    # `-m` with no overrides at all: Hydra's override_dirname is empty
    assert sweep_subdir(0, str(tmp_path / "x"), [], "") == "0"


def test_a_command_line_value_wins_over_the_sweepers_params(tmp_path):
    """`-m experiment=bag/table seed=0`: the experiment's params list seeds 0,1,2, the command line
    fixes seed 0, so the jobs are named by their row only."""
    OmegaConf.save(
        {
            "hydra": {
                "overrides": {"task": ["experiment=bag/table", "seed=0"]},
                "sweeper": {"params": {"+experiment/bag": "mlp,dot", "seed": "0,1,2"}},
            }
        },
        tmp_path / "multirun.yaml",
    )
    assert swept_keys(tmp_path) == {"experiment/bag"}
    job = ["experiment=bag/table", "seed=0", "+experiment/bag=dot"]
    assert sweep_subdir(1, str(tmp_path), job, "fallback") == "1_bag=dot"


def test_the_sweep_config_is_saved_for_sweepers_that_save_none(tmp_path):
    """Optuna saves no multirun.yaml; the guard saves the sweep's config first, so a job's name
    lists only the searched keys, not one the command line fixes (`scorer=dot`)."""
    sweep = tmp_path / "sweep"
    config = {
        "hydra": {
            "sweep": {"dir": str(sweep)},
            "overrides": {"task": ["hparams_search=bag_optuna", "scorer=dot"]},
            "sweeper": {
                "params": {
                    "scorer": "choice(additive, dot)",
                    "optimizer.lr": "tag(log, interval(0.0001, 0.01))",
                }
            },
        }
    }
    SweepDirGuard().on_multirun_start(OmegaConf.create(config))
    assert OmegaConf.load(sweep / "multirun.yaml") == config
    assert swept_keys(sweep) == {"optimizer.lr"}
    job = ["optimizer.lr=0.002", "scorer=dot", "hparams_search=bag_optuna"]
    assert sweep_subdir(0, str(sweep), job, "fallback") == "0_optimizer.lr=0.002"


@pytest.mark.parametrize(
    ("variant", "target", "backbone", "attention", "scorer"),
    [
        ("mlp", "BagMLP", None, None, None),
        ("simple", "BagAttention", "mlp", "simple", None),
        ("dot", "BagAttention", "mlp", "context", "DotScorer"),
        ("bilinear", "BagAttention", "mlp", "context", "BilinearScorer"),
        ("additive", "BagAttention", "mlp", "context", "AdditiveScorer"),
        ("conv", "BagAttention", "conv", "context", "AdditiveScorer"),
        ("maxpool", "BagMaxPool", "mlp", None, None),  # an extra row, outside the book's table
    ],
)
def test_bag_table_rows_compose(compose_cfg, variant, target, backbone, attention, scorer):
    cfg = compose_cfg("experiment=bag/table", f"+experiment/bag={variant}")
    assert (cfg.trainer.max_epochs, cfg.data.shift, cfg.get("scheduler")) == (
        10,
        0,
        None,
    )  # the book
    assert get_class(cfg.model._target_).__name__ == target
    assert cfg.model.get("backbone") == backbone and cfg.model.get("attention") == attention
    if scorer is not None:
        assert cfg.scorer._target_.endswith(scorer)
    params = cfg.hydra.sweeper.params
    assert params["+experiment/bag"].split(",") == [
        "mlp",
        "simple",
        "dot",
        "bilinear",
        "additive",
        "conv",
    ]


# The per-row commands of the tuned bag table (docs/results.md): bag_attn's defaults.
TUNED_ROWS = {
    "simple": ["model=bag_attn", "model.attention=simple", "model.pooled_norm=false"],
    "dot": ["model=bag_attn", "scorer=dot"],
    "scaled_dot": ["model=bag_attn", "scorer=scaled_dot"],
    "bilinear": ["model=bag_attn", "scorer=bilinear"],
    "additive": ["model=bag_attn", "scorer=additive"],
    "conv": ["model=bag_attn", "model.backbone=conv", "scorer=additive"],
}


@pytest.mark.parametrize("row", TUNED_ROWS)
def test_the_tuned_bag_table_runs_the_reported_commands(compose_cfg, row):
    """Each job of `experiment=bag/table_tuned`, the row with the recipe spelled out
    (`experiment=bag/<row>` + the recipe), the row with `recipe=bag_tuned`, and the bare model
    command (bag_attn's defaults) compose the very config of the row's reported command, so all
    repeat those numbers (on a machine that computes alike)."""
    swept = compose_cfg("experiment=bag/table_tuned", f"+experiment/bag={row}", "seed=1")
    recipe = ["scheduler=cosine_warmup", "trainer.max_epochs=15", "data.shift=2", "seed=1"]
    short = compose_cfg(f"experiment=bag/{row}", *recipe)
    by_name = compose_cfg(f"experiment=bag/{row}", "recipe=bag_tuned", "seed=1")
    bare = compose_cfg(*TUNED_ROWS[row], "seed=1")
    reported = compose_cfg(*TUNED_ROWS[row], *recipe)
    job = [OmegaConf.to_container(cfg) for cfg in (swept, short, by_name, bare, reported)]
    for cfg in job:
        del cfg["hydra"]  # the sweep's own settings; the job's config is the rest
    assert all(cfg == job[-1] for cfg in job)
    params = compose_cfg("experiment=bag/table_tuned").hydra.sweeper.params
    assert params["+experiment/bag"].split(",") == list(TUNED_ROWS)


LAUNCHER_PLUGINS = {
    "parallel": "hydra_plugins.hydra_joblib_launcher",
    "slurm": "hydra_plugins.hydra_submitit_launcher",
    "submitit_local": "hydra_plugins.hydra_submitit_launcher",
}


def test_every_launcher_yaml_is_tested():
    """A new conf/hydra/launcher/*.yaml fails here until it joins LAUNCHER_PLUGINS (and so the
    composition test below, which the glob over groups in test_configs.py leaves to this file)."""
    yamls = sorted(p.stem for p in (CONF_DIR / "hydra" / "launcher").glob("*.yaml"))
    assert yamls == sorted(LAUNCHER_PLUGINS)


@pytest.mark.parametrize(("launcher", "plugin"), LAUNCHER_PLUGINS.items())
def test_launcher_configs_compose(compose_cfg, launcher, plugin):
    pytest.importorskip(plugin, reason="pip install -e '.[sweep]'")
    cfg = compose_cfg(f"hydra/launcher={launcher}", "trainer=ddp_cpu")
    assert "Launcher" in cfg.hydra.launcher._target_
    if launcher == "slurm":  # one task per device (tests/runner/test_slurm.py)
        assert cfg.hydra.launcher.tasks_per_node == 2 and cfg.hydra.launcher.nodes == 1
    if launcher == "submitit_local":  # ddp_spawn starts the ranks inside the one process
        assert cfg.hydra.launcher.tasks_per_node == 1


def test_optuna_search_config_composes(compose_cfg):
    cfg = compose_cfg("hparams_search=bag_optuna")
    assert cfg.hydra.sweeper._target_ == SWEEPER_TARGET
    assert cfg.hydra.sweeper.direction == "maximize" and cfg.optimized_metric == "val/acc_best"
    assert cfg.hydra.sweeper.pruner._target_ == "optuna.pruners.MedianPruner"


def test_an_optuna_search_names_its_jobs_by_the_searched_keys(tmp_path):
    """Two trials with the scorer and the hidden size (TINY) fixed on the command line: each job
    is a completed run named by the one key the search still varies, and the sweep dir keeps the
    sweep's config."""
    pytest.importorskip("optuna", reason="pip install -e '.[optuna]'")
    sweep = tmp_path / "search"
    search = ["hparams_search=bag_optuna", "hydra.sweeper.n_trials=2", f"hydra.sweep.dir={sweep}"]
    result = run_cli(tmp_path, *search, "scorer=dot", *TINY)
    assert result.returncode == 0, result.stderr[-4000:]
    jobs = sorted(p.parent.name for p in sweep.glob("*/metrics.json"))
    assert [name.split("_", 1)[0] for name in jobs] == ["0", "1"]
    for name in jobs:
        keys = [item.split("=")[0] for item in name.split("_", 1)[1].split(",")]
        assert keys == ["optimizer.lr"], name
        record = json.loads((sweep / name / "metrics.json").read_text())
        assert record["status"] == "completed" and "scorer=dot" in record["overrides"]
    assert "scorer=dot" in OmegaConf.load(sweep / "multirun.yaml").hydra.overrides.task


def test_optuna_search_space_composes(compose_cfg):
    """Read the search config as it is written and check that it maximises the metric the runs
    record, reports the metric their validations log, and that every value it tries composes."""
    from conftest import CONF_DIR

    search = OmegaConf.load(CONF_DIR / "hparams_search" / "bag_optuna.yaml")
    monitor = OmegaConf.load(CONF_DIR / "callbacks" / "default.yaml").model_checkpoint.monitor
    assert search.optimized_metric == f"{monitor}_best" == "val/acc_best"  # fit_and_test's key
    assert search.hydra.sweeper.direction == "maximize"
    assert f"{search.hydra.sweeper.monitor}_best" == search.optimized_metric
    params = search.hydra.sweeper.params
    assert set(params) == {"scorer", "model.hidden_size", "optimizer.lr"}
    for key, space in params.items():
        # choice(a, b, ...) -> every option; tag(log, interval(lo, hi)) -> both bounds
        inner = space[space.rindex("(") + 1 : space.index(")")]
        for value in (v.strip() for v in inner.split(",")):
            cfg = compose_cfg(f"{key}={value}")
            if key == "scorer":
                assert cfg.hydra.runtime.choices.scorer == value
            else:
                assert OmegaConf.select(cfg, key) == pytest.approx(float(value)), key


def test_relaunching_strategy_rejected_in_a_local_multirun(monkeypatch):
    for key in ("SLURM_NTASKS", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(ConfigError, match="trainer.strategy=fsdp re-launches"):
        check_strategy("fsdp", multirun=True)
    with pytest.raises(ConfigError, match="strategy=ddp_find_unused_parameters_true re-launches"):
        check_strategy("ddp_find_unused_parameters_true", multirun=True)  # ddp, by another name
    for strategy in ("ddp", "deepspeed_stage_2"):
        with pytest.raises(ConfigError, match=f"trainer.strategy={strategy} re-launches"):
            check_strategy(strategy, multirun=True)
    check_strategy("fsdp", multirun=False)
    check_strategy("ddp_spawn", multirun=True)
    for key in ("SLURM_NTASKS", "TORCHELASTIC_RUN_ID"):  # a cluster starts each rank itself
        monkeypatch.setenv(key, "4")
        check_strategy("ddp", multirun=True)
        monkeypatch.delenv(key)


@pytest.mark.parametrize(
    ("variant", "target", "scorer"),
    [
        ("chapter_mean", "LSTMMean", None),
        ("chapter_additive", "LSTMAttention", "AdditiveScorer"),
        ("chapter_dot", "LSTMAttention", "DotScorer"),
        ("chapter_mhsa", "LSTMSelfAttention", None),
    ],
)
def test_imdb_table_rows_compose(compose_cfg, variant, target, scorer):
    cfg = compose_cfg("experiment=imdb/table", f"+experiment/imdb={variant}")
    assert get_class(cfg.model._target_).__name__ == target
    assert cfg.trainer.max_epochs == 2 and cfg.data.max_seq_len == 256  # the nndl settings
    assert (cfg.data.val_from, cfg.data.val_fraction) == ("test", 0.5)  # the chapter port's split
    if scorer is not None:
        assert cfg.scorer._target_.endswith(scorer)
    rows = "chapter_mean,chapter_additive,chapter_dot,chapter_mhsa"
    assert cfg.hydra.sweeper.params["+experiment/imdb"] == rows


def test_lcqmc_table_is_a_grid_over_impl_and_depth(compose_cfg):
    cfg = compose_cfg("experiment=lcqmc/table")
    assert get_class(cfg.model._target_).__name__ == "TransformerMatcher"
    params = cfg.hydra.sweeper.params
    assert params["model.impl"] == "custom,torch" and params["model.num_layers"] == "1,2"


def test_failed_jobs_callback_counts_each_unfinished_record_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    records = (("0_a", {"status": "completed"}), ("1_b", {"status": "failed"}))
    records += (("2_c", {"status": "running"}), ("3_d", ["not", "a", "record"]))
    for name, record in records:
        (tmp_path / "sweep" / name).mkdir(parents=True)
        (tmp_path / "sweep" / name / "metrics.json").write_text(json.dumps(record))
    # job 1 was already counted in-process (absolute path); the sweep dir is relative
    monkeypatch.setattr(sweeps, "FAILED_JOBS", [str(tmp_path / "sweep" / "1_b")])
    FailedJobs().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": "sweep"}}}))
    expected = [str(tmp_path / "sweep" / n) for n in ("1_b", "2_c", "3_d")]
    assert sorted(sweeps.FAILED_JOBS) == expected  # 3_d: valid JSON, not a record (was a crash)


def test_sweep_dir_guard_refuses_a_dir_holding_a_sweep(tmp_path, capsys):
    def start(sweep_dir):
        SweepDirGuard().on_multirun_start(
            OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}})
        )

    start(tmp_path / "new")  # a new dir, or an existing one without runs, is fine
    (tmp_path / "empty" / "notes").mkdir(parents=True)
    start(tmp_path / "empty")
    (tmp_path / "jobs" / "0_seed=0").mkdir(parents=True)  # no multirun.yaml (e.g. Optuna)
    (tmp_path / "jobs" / "0_seed=0" / "metrics.json").write_text("{}")
    (tmp_path / "swept").mkdir()
    (tmp_path / "swept" / "multirun.yaml").write_text("hydra: {}")
    run = tmp_path / "runs" / "r"  # a single run's dir: a sweep must not be written inside it
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (run / "metrics.json").write_text("{}")
    with pytest.raises(SystemExit) as exit_info:
        start(run / "sweep")
    assert exit_info.value.code == 2
    assert f"error: hydra.sweep.dir={run / 'sweep'} lies inside the run {run}," in (
        capsys.readouterr().err
    )
    for name, found in (("jobs", "0_seed=0"), ("swept", "multirun.yaml")):
        with pytest.raises(SystemExit) as exit_info:
            start(tmp_path / name)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert f"error: hydra.sweep.dir={tmp_path / name} holds an earlier sweep" in err
        assert f"({tmp_path / name / found} exists)" in err and "leave hydra.sweep.dir out" in err


def test_sweep_dir_guard_refuses_bad_launcher_jobs_and_a_file_in_the_way(tmp_path, capsys):
    """joblib stopped on n_jobs=0 with a traceback; Hydra on a file where the sweep dir goes."""
    for n_jobs in (0, "abc", True):
        config = {"hydra": {"sweep": {"dir": str(tmp_path / "s")}, "launcher": {"n_jobs": n_jobs}}}
        with pytest.raises(SystemExit) as exit_info:
            SweepDirGuard().on_multirun_start(OmegaConf.create(config))
        assert exit_info.value.code == 2
        assert f"error: hydra.launcher.n_jobs={n_jobs} must be a whole number" in (
            capsys.readouterr().err
        )
    (tmp_path / "afile").write_text("x")
    config = {"hydra": {"sweep": {"dir": str(tmp_path / "afile" / "s")}}}
    config["hydra"]["overrides"] = {"hydra": [f"hydra.sweep.dir={tmp_path}/afile/s"]}
    with pytest.raises(SystemExit):
        SweepDirGuard().on_multirun_start(OmegaConf.create(config))
    assert f"{tmp_path / 'afile'} is a file, so no output dir" in capsys.readouterr().err


def test_an_output_dir_set_by_hand_is_refused_in_a_multirun(tmp_path, capsys):
    """Every job would write its checkpoints and events into that one folder."""
    config = {"hydra": {"sweep": {"dir": str(tmp_path / "s")}}}
    config["hydra"]["overrides"] = {"task": [f"paths.output_dir={tmp_path}/o", "seed=0,1"]}
    with pytest.raises(SystemExit) as exit_info:
        SweepDirGuard().on_multirun_start(OmegaConf.create(config))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: paths.output_dir={tmp_path}/o: paths.output_dir is the run's")
    assert not (tmp_path / "s").exists()


def test_resume_is_refused_in_a_multirun(tmp_path, capsys):
    """Every job runs in a new dir of the sweep: resume= would silently train from scratch."""
    run = tmp_path / "run"
    for resume, task in (
        ("auto", ["resume=auto", "seed=0,1"]),
        (str(run), [f"resume={run}"]),
        (None, ["resume=null,auto"]),  # swept: not in the sweep's own config
        ("auto", ["experiment=x", "seed=0,1"]),  # set by a config file, not on the command line
    ):
        config = {"resume": resume, "hydra": {"sweep": {"dir": str(tmp_path / "s")}}}
        config["hydra"]["overrides"] = {"task": task}
        with pytest.raises(SystemExit) as exit_info:
            SweepDirGuard().on_multirun_start(OmegaConf.create(config))
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: resume=") and "resume a run on its own, without -m" in err
    for task, sweep in ((["resume=null", "seed=0,1"], "s"), (["~resume", "seed=0,1"], "s2")):
        fine = {"resume": None, "hydra": {"sweep": {"dir": str(tmp_path / sweep)}}}
        fine["hydra"]["overrides"] = {"task": task}
        SweepDirGuard().on_multirun_start(OmegaConf.create(fine))

    result = run_cli(tmp_path, "-m", "resume=auto", "seed=0,1", *TINY)
    assert result.returncode == 2, result.stderr[-4000:]
    assert "error: resume=auto: a multirun (-m)" in result.stderr
    assert "Traceback" not in result.stderr
    assert not list((tmp_path / "outputs").rglob("metrics.json"))  # no job ran


@pytest.mark.skipif(plugin_installed("optuna"), reason="Optuna is installed")
def test_a_search_without_optuna_says_how_to_install_it(tmp_path):
    """Hydra said only "Error locating target 'optuna.samplers.TPESampler'"."""
    result = run_cli(tmp_path, "hparams_search=bag_optuna", *TINY)
    assert result.returncode == 2
    assert (
        "error: hparams_search=bag_optuna runs on Optuna, which is not installed: "
        "pip install -e '.[optuna]'" in result.stderr
    )


def test_a_job_name_of_the_longest_length_kept_is_not_cut(tmp_path):
    """The cut starts beyond MAX_NAME characters: a name of exactly MAX_NAME is kept whole."""
    OmegaConf.save({"hydra": {"overrides": {"task": ["seed=0,1"]}}}, tmp_path / "multirun.yaml")
    for length, cut in ((sweeps.MAX_NAME, False), (sweeps.MAX_NAME + 1, True)):
        line = "seed=" + "9" * (length - len("seed="))
        name = sweep_subdir(0, str(tmp_path), [line], "")
        assert (name == f"0_{line}") is not cut and len(name) <= len("0_") + sweeps.MAX_NAME


def test_resume_of_a_sweep_job_is_refused_naming_its_whole_dir(tmp_path):
    """A sweep job's dir has `=` in its name (`0_seed=0`): the refusal names all of it."""
    job = tmp_path / "sweep" / "0_seed=0"
    config = {"resume": None, "hydra": {"overrides": {"task": [f"resume={job}", "seed=0,1"]}}}
    with pytest.raises(ConfigError) as refused:
        sweeps.check_no_resume(OmegaConf.create(config))
    assert str(refused.value).startswith(f"resume={job}: a multirun")
