"""The lifecycle of a run record that train and evaluate share (attnexp.runner.steps.recording)."""

import pytest

from attnexp.errors import ConfigError
from attnexp.runner.steps import recording
from attnexp.runs.record import FAILED, METRICS_FILE, RunRecord, read_record


def test_a_block_that_ends_well_leaves_the_record_running_for_its_completion(tmp_path):
    record = RunRecord(tmp_path, seed=0, overrides=[])
    with recording(record):
        assert read_record(tmp_path / METRICS_FILE)["status"] == "running"
    record.complete({"test/acc": 1.0})
    assert read_record(tmp_path / METRICS_FILE)["status"] == "completed"


def test_a_failure_is_recorded_and_raised_again(tmp_path):
    seen, record = [], RunRecord(tmp_path, seed=0, overrides=[])
    with pytest.raises(KeyboardInterrupt), recording(record, after_failure=seen.append):
        raise KeyboardInterrupt
    assert read_record(tmp_path / METRICS_FILE)["status"] == FAILED
    assert [type(err) for err in seen] == [KeyboardInterrupt]


def test_a_refusal_replaces_the_error_it_says_better(tmp_path):
    refusal = ConfigError("disk full: free space (set paths.log_dir=...)")
    record = RunRecord(tmp_path, seed=0, overrides=[])
    with (
        pytest.raises(ConfigError, match="paths.log_dir") as raised,
        recording(record, refusal_of=lambda err: refusal),
    ):
        raise OSError(28, "No space left on device")
    assert isinstance(raised.value.__cause__, OSError)
    assert "paths.log_dir" in read_record(tmp_path / METRICS_FILE)["error"]
