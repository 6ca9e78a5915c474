"""Optuna searches (hparams_search=..., attnexp's sweeper): the search space, pruning from inside
the runs, failed trials, two workers on one sqlite study, and a search continued later."""

import json
import subprocess
from pathlib import Path

import pytest
from cli_helpers import TINY, cli_command, run_cli
from postgres_server import postgres_server, server_binaries

from attnexp.errors import ConfigError
from attnexp.runs.search import contiguous_runs, search_space, storage_url

optuna = pytest.importorskip("optuna", reason="pip install -e '.[optuna]'")
from optuna.distributions import (  # noqa: E402
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState  # noqa: E402


def test_the_search_space_reads_hydra_optuna_sweepers_syntax():
    params = {
        "scorer": "choice(additive, dot)",
        "model.hidden_size": "range(16, 65, 16)",
        "optimizer.lr": "tag(log, interval(0.0001, 0.01))",
        "data.batch_size": "interval(8, 64)",
        "seed": "choice(0, 1)",  # the command line's fixed seed wins
    }
    space, fixed = search_space(params, ["seed=3", "trainer.max_epochs=1,2", "+data.extra=1,2"])
    assert fixed == ["seed=3"]
    assert space == {
        "trainer.max_epochs": CategoricalDistribution([1, 2]),
        "+data.extra": CategoricalDistribution([1, 2]),
        "scorer": CategoricalDistribution(["additive", "dot"]),
        "model.hidden_size": IntDistribution(16, 64, step=16),
        "optimizer.lr": FloatDistribution(0.0001, 0.01, log=True),
        "data.batch_size": FloatDistribution(8, 64),  # Hydra's intervals are of floats
    }
    with pytest.raises(ConfigError, match=r"hydra.sweeper.params.seed=glob\(\*\)"):
        search_space({"seed": "glob(*)"}, [])


def test_trials_launch_in_runs_of_consecutive_numbers():
    assert contiguous_runs([3, 4, 7, 8, 9, 11]) == [[3, 4], [7, 8, 9], [11]]
    assert contiguous_runs([]) == []


def test_a_relative_sqlite_storage_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert storage_url("sqlite:///s.db", "x") == f"sqlite:///{tmp_path / 's.db'}"
    assert storage_url(None, "sweep") == f"sqlite:///{tmp_path / 'sweep' / 'optuna.db'}"
    url = "postgresql+psycopg://me@localhost/searches"
    assert storage_url(url, "sweep") == url


# The first trials each seed draws (TPE draws its first ones at random): 2 -> data.min_bag_size=1
# trainer.max_epochs=1 (completes), 10 -> 1, 3 (pruned), 3 -> (5, 3) (fails), then (1, 3).
SEEDS = (2, 10)
# A job with data.min_bag_size=5 fails (above the bags' size, 3); 3 epochs of 2 steps are pruned
# at step 4 (the pruner's first look after its warm-up, whatever the value); 1 epoch completes.
SEARCH = [
    "-m",  # for the sweeps on the command line
    *[a for a in TINY if not a.startswith("trainer.max_epochs")],
    "hparams_search=bag_optuna",
    "data.variable=true",
    "data.min_bag_size=1,5",  # the command line's sweeps are searched too
    "trainer.max_epochs=1,3",
    "hydra/sweeper/pruner=threshold",
    "hydra.sweeper.pruner.lower=2.0",
    "hydra.sweeper.pruner.n_warmup_steps=3",
]


def test_pruned_and_failed_trials_two_workers_then_a_search_continued(tmp_path):
    """Two worker processes share one sqlite study; each trial's state agrees with its run's
    record (pruned runs say `pruned`, not failed); job numbers are the trials' numbers; a search
    started again with the same study and storage continues the numbering, here with two trials
    at once through the joblib launcher."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    common = [*SEARCH, f"hydra.sweeper.storage={storage}", "hydra.sweeper.n_trials=3"]
    workers = [
        start_worker(
            tmp_path,
            *common,
            f"hydra.sweeper.sampler.seed={seed}",
            f"hydra.sweep.dir={tmp_path / f'w{seed}'}",
        )
        for seed in SEEDS
    ]
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        assert "trials finished" in out + err, err[-4000:]  # the exit status: failed jobs' count
    study = optuna.load_study(study_name="bag_attn_search", storage=storage)
    first = len(study.trials)
    assert 3 <= first <= 4  # each worker stops at 3 finished; one more may be in flight
    # two more, at once in two processes: they report to the study and are pruned from there
    again = run_cli(
        tmp_path,
        *common[:-1],
        f"hydra.sweeper.n_trials={first + 2}",
        "hydra.sweeper.n_jobs=2",
        "hydra/launcher=parallel",
        "hydra.sweeper.sampler.seed=3",
        f"hydra.sweep.dir={tmp_path / 'later'}",
    )
    assert "trials finished" in again.stdout + again.stderr, again.stderr[-4000:]

    trials = {
        t.number: t for t in optuna.load_study(study_name="bag_attn_search", storage=storage).trials
    }
    assert sorted(trials) == list(range(first + 2))
    runs = {int(p.parent.name.split("_")[0]): p.parent for p in tmp_path.glob("*/*/metrics.json")}
    assert sorted(runs) == sorted(trials)  # one run dir per trial, named by its number
    assert runs[first].parent.name == runs[first + 1].parent.name == "later"
    assert trials[first + 1].state == TrialState.PRUNED
    # the exit status counts the failed jobs, never the pruned ones
    assert again.returncode == [trials[first].state, trials[first + 1].state].count(TrialState.FAIL)
    states = set()
    for number, trial in trials.items():
        record = json.loads((runs[number] / "metrics.json").read_text())
        states.add(trial.state)
        assert f"data.min_bag_size={trial.params['data.min_bag_size']}" in record["overrides"]
        if trial.params["data.min_bag_size"] == 5:
            assert trial.state == TrialState.FAIL and record["status"] == "failed"
        elif trial.params["trainer.max_epochs"] == 3:
            assert trial.state == TrialState.PRUNED and record["status"] == "pruned"
            assert record["pruned"]["step"] == 4 and record["history"][-1]["epoch"] == 1
            assert trial.intermediate_values == {
                v["step"]: v["val/acc"] for v in record["validations"]
            }
            assert "test/acc" not in record["metrics"]
        else:
            assert trial.state == TrialState.COMPLETE and record["status"] == "completed"
            assert trial.value == record["metrics"]["val/acc_best"]
    assert states == {TrialState.FAIL, TrialState.PRUNED, TrialState.COMPLETE}


def start_worker(tmp_path: Path, *args: str) -> subprocess.Popen:
    """run_cli's command, started without waiting for it."""
    cmd, env = cli_command(tmp_path, *args)
    return subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.slow
def test_a_search_shared_in_postgresql(tmp_path):
    """The study in a PostgreSQL server (a throwaway cluster: tests/postgres_server.py); the runs
    report to it from their own processes (hydra/launcher=parallel) and are pruned through it."""
    pytest.importorskip("psycopg", reason="pip install -e '.[postgres]'")
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher", reason="pip install -e '.[sweep]'")
    if server_binaries() is None:
        pytest.skip("no PostgreSQL server binaries (apt-get install -y postgresql)")
    with postgres_server() as url:
        result = run_cli(
            tmp_path,
            *SEARCH,
            f"hydra.sweeper.storage='{url}'",
            "hydra.sweeper.n_trials=2",
            "hydra.sweeper.n_jobs=2",
            "hydra/launcher=parallel",
            "hydra.sweeper.sampler.seed=10",  # its first trial is pruned
        )
        assert "2 trials finished" in result.stdout + result.stderr, result.stderr[-4000:]
        study = optuna.load_study(study_name="bag_attn_search", storage=url)
        states = [t.state for t in sorted(study.trials, key=lambda t: t.number)]
    assert states[0] == TrialState.PRUNED and len(states) == 2
    (sweep,) = (tmp_path / "outputs" / "multiruns").iterdir()
    record = json.loads(next(sweep.glob("0_*/metrics.json")).read_text())
    assert record["status"] == "pruned"
