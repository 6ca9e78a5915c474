"""A hand-picked hydra.run.dir is new or empty, or refused; the config in .hydra/ is the config of
the process that holds the run's lock (two runs started at once on one dir)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cli_helpers import RUN_MODULES, TINY, run_cli_in_process, run_counting_imports

from attnexp.errors import ConfigError
from attnexp.runs import dirs
from attnexp.runs.dirs import check_new_dir
from attnexp.runs.lock import owning
from attnexp.runs.resume import check_resume


def test_a_folder_with_anything_in_it_is_refused(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "README.md").write_text("a project\n")
    with pytest.raises(ConfigError, match=r"is not empty \(2 entries: README.md, src\)"):
        check_new_dir(tmp_path, can_resume=True)
    check_new_dir(tmp_path / "new", can_resume=True)  # not there yet
    (tmp_path / "empty").mkdir()
    check_new_dir(tmp_path / "empty", can_resume=True)


def test_the_root_of_the_disk_is_refused_without_a_search():
    """hydra.run.dir=/ is judged by its own entries: nothing below it is searched."""
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"hydra.run.dir=/ is not empty"):
        check_new_dir(Path("/"), can_resume=True)
    assert time.perf_counter() - start < 0.5


def another_hydra_apps_dir(path: Path) -> Path:
    """What a Lightning-Hydra app leaves: its config, its checkpoints, no attnexp record."""
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "config.yaml").write_text("model:\n  lr: 0.1\n")
    (path / "checkpoints").mkdir()
    (path / "checkpoints" / "last.ckpt").write_bytes(b"")
    return path


def test_another_hydra_apps_dir_is_no_run(tmp_path):
    other = another_hydra_apps_dir(tmp_path / "other")
    with pytest.raises(ConfigError) as refused:
        check_new_dir(other, can_resume=True)
    assert "resume=" not in str(refused.value)  # nothing of ours to continue
    with pytest.raises(ConfigError, match=r"is not an attnexp run dir \(no readable metrics.json"):
        check_resume(str(other), [])


def test_a_new_run_never_writes_among_other_files(tmp_path):
    """A folder with files of its own (a tokenizer_src.json, a git checkout's sources) never gets
    a run's checkpoints/, tb/ and metrics.json: refused before torch loads, nothing written."""
    target = tmp_path / "project"
    target.mkdir()
    (target / "tokenizer_src.json").write_text('{"mine": true}\n')
    result, imported = run_counting_imports(
        ["-m", "attnexp", f"hydra.run.dir={target}", f"paths.log_dir={tmp_path}/outputs"], tmp_path
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"hydra.run.dir={target} is not empty (1 entries: tokenizer_src.json)" in result.stderr
    assert not imported & RUN_MODULES
    assert sorted(p.name for p in target.iterdir()) == ["tokenizer_src.json"]


@pytest.fixture
def raced(monkeypatch):
    """Two runs racing for one dir both pass the guard while it is still empty: the guard's check
    of the dir is skipped here, so the second run meets the first at the lock."""
    monkeypatch.setattr(dirs, "check_new_dir", lambda run_dir, can_resume: None)


def test_the_run_refused_at_the_lock_leaves_no_config(tmp_path, raced):
    """.hydra/ is written under the lock: the refused run's config (seed 2) never stands beside
    the running one's record (seed 1)."""
    run_dir = tmp_path / "shared"
    with owning(run_dir, "train"):  # the first run, still at work
        second = run_cli_in_process(tmp_path, *TINY, "seed=2", f"hydra.run.dir={run_dir}")
    assert second.returncode == 2 and "is in use by process" in second.stderr, second.stderr
    assert not (run_dir / ".hydra").exists()


def test_a_run_that_finds_its_dir_taken_under_the_lock_is_refused(tmp_path, raced):
    """The first run of the race took the lock, wrote its config and record, and ended before
    the second got the lock: the second must not train into its dir."""
    run_dir = tmp_path / "shared"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 1\n")
    (run_dir / "metrics.json").write_text(json.dumps({"status": "completed", "seed": 1}))
    second = run_cli_in_process(tmp_path, *TINY, "seed=2", f"hydra.run.dir={run_dir}")
    assert second.returncode == 2, second.stderr[-3000:]
    assert f"{run_dir} was taken by another run started at the same time" in second.stderr
    assert yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text()) == {"seed": 1}
    assert json.loads((run_dir / "metrics.json").read_text())["seed"] == 1


def test_the_run_that_holds_the_lock_writes_its_own_config(tmp_path):
    run_dir = tmp_path / "mine"
    result = run_cli_in_process(tmp_path, *TINY, "seed=3", f"hydra.run.dir={run_dir}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())["seed"] == 3
    assert "seed=3" in yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
    assert (run_dir / ".hydra" / "hydra.yaml").is_file()
    assert json.loads((run_dir / "metrics.json").read_text())["seed"] == 3


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_log_dir_where_no_folder_can_be_made_is_one_line(tmp_path):
    """paths.log_dir=/proc gave three chained FileNotFoundErrors from Hydra."""
    result, imported = run_counting_imports(["-m", "attnexp", "paths.log_dir=/proc"], tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        "error: paths.log_dir=/proc: no folder can be made in /proc (FileNotFoundError: No such "
        "file or directory), so no output dir can be made there (set paths.log_dir=<a folder "
        "this user can write>)"
    ]
    assert not imported & RUN_MODULES


@pytest.mark.slow
def test_two_runs_started_at_once_on_one_dir(tmp_path):
    """The race itself, as a user meets it: one run is refused, and the dir's config, overrides
    and record are all the other one's."""
    run_dir = tmp_path / "shared"
    (tmp_path / "data").mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    paths = [f"paths.log_dir={tmp_path}/outputs", f"paths.data_dir={tmp_path}/data"]
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "attnexp",
                *paths,
                *TINY,
                f"seed={seed}",
                f"hydra.run.dir={run_dir}",
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    ends = [(run.communicate(timeout=300)[1], run.returncode)[::-1] for run in runs]
    assert sorted(code for code, _ in ends) == [0, 2], ends
    seed = json.loads((run_dir / "metrics.json").read_text())["seed"]
    assert seed == (1, 2)[[code for code, _ in ends].index(0)]
    assert yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())["seed"] == seed
    assert f"seed={seed}" in yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
