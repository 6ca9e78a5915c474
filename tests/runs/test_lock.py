"""One process at a time in a run dir: the lock, its refusal, and a resume refused while held."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from attnexp.errors import ConfigError
from attnexp.runs.lock import OWNER_FILE, owning
from tests.cli_helpers import TINY, run_cli, run_cli_in_process


def test_a_second_owner_is_refused_with_the_first_ones_pid(tmp_path):
    busy = rf"in use by process {os.getpid()} .*\(train\)"
    with owning(tmp_path, "train"), pytest.raises(ConfigError, match=busy), owning(tmp_path, "x"):
        pass
    with owning(tmp_path, "train"):  # released: free again
        pass
    assert not (tmp_path / OWNER_FILE).exists()


def test_a_killed_owner_leaves_the_dir_free(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from attnexp.runs.lock import owning\n"
            "with owning(sys.argv[1], 'train'):\n    print('held', flush=True); time.sleep(60)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=rf"process {holder.pid} "), owning(tmp_path, "t"):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    deadline = time.time() + 10
    while True:  # the kernel drops a dead process's lock
        try:
            with owning(tmp_path, "train"):
                break
        except ConfigError:
            assert time.time() < deadline
            time.sleep(0.1)


def test_a_resume_of_a_run_dir_another_process_holds_is_refused(tmp_path):
    """Two resumes started together: the second is refused (here the test holds the dir, as the
    first resume would), and the run's record and checkpoints stay as they were."""
    result = run_cli_in_process(tmp_path, *TINY)
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "outputs" / "runs").iterdir()
    record = (run_dir / "metrics.json").read_text()
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    with owning(run_dir, "train"):
        result = run_cli(tmp_path, *TINY, f"resume={run_dir}", "trainer.max_epochs=2")
    assert result.returncode == 2  # by the guard, before Hydra or torch start the run
    assert f"is still running (process {os.getpid()} on" in result.stderr
    assert (run_dir / "metrics.json").read_text() == record
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == checkpoints
    assert json.loads(record)["status"] == "completed"


def test_a_run_dir_is_named_by_what_the_run_was_asked_for():
    from attnexp.runs.naming import MAX_LABEL, new_run_name, run_label

    line = ["model=lstm_attn", "scorer=dot", "paths.data_dir=/d", "resume=null"]
    assert run_label(line) == "model=lstm_attn,scorer=dot"
    assert run_label(["+experiment/imdb=tuned", "seed=1", "~recipe"]) == (
        "imdb=tuned,seed=1,no-recipe"
    )
    assert len(run_label([f"model.hidden_size={'9' * 200}"])) == MAX_LABEL
    assert new_run_name(["seed=3"]).endswith("_seed=3")
    assert "_" in new_run_name() and "=" not in new_run_name()
