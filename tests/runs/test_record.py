"""attnexp.runs.record: the one reader of metrics.json, as the other modules use it."""

import json

import pytest

from attnexp.runs.record import METRICS_FILE, existing_record, read_record


def test_read_record_reads_an_object_and_refuses_anything_else(tmp_path):
    path = tmp_path / METRICS_FILE
    path.write_text(json.dumps({"status": "completed"}))
    assert read_record(path) == {"status": "completed"}
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="list"):
        read_record(path)
    path.write_text('{"status": ')  # cut short
    with pytest.raises(ValueError):
        read_record(path)
    with pytest.raises(OSError):
        read_record(tmp_path / "nowhere" / METRICS_FILE)


def test_existing_record_is_empty_where_there_is_none_to_read(tmp_path):
    assert existing_record(tmp_path) == {}
    (tmp_path / METRICS_FILE).write_text("not json")
    assert existing_record(tmp_path) == {}
    (tmp_path / METRICS_FILE).write_text(json.dumps({"seed": 3}))
    assert existing_record(tmp_path) == {"seed": 3}
