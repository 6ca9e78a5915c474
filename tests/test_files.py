from pathlib import Path

import pytest

from attnexp import files
from attnexp.files import checkpoint_value, next_attempt, not_a_folder, write_atomically


def test_write_atomically_replaces_the_file_in_one_step(tmp_path):
    path = tmp_path / "deep" / "metrics.json"
    write_atomically(path, lambda partial: partial.write_text("first"))
    write_atomically(path, lambda partial: partial.write_text("second"))
    assert path.read_text() == "second"
    assert [p.name for p in path.parent.iterdir()] == ["metrics.json"]


def test_write_atomically_makes_missing_folders_and_returns_the_path(tmp_path):
    """A run record or a token cache written below folders that are not there yet (more than one
    level): mkdir without parents failed; text.py returns the path it is given back."""
    path = tmp_path / "a" / "b" / "tokenizer.json"
    assert write_atomically(path, lambda partial: partial.write_text("{}")) == path
    assert path.read_text() == "{}"


def test_checkpoint_value_reads_a_checkpoint_holding_more_than_tensors(tmp_path):
    """A Lightning checkpoint holds objects a weights-only load refuses (the hyperparameters, here
    a Path): read weights-only, resume's epoch check skipped silently and the step read failed."""
    import torch

    ckpt = tmp_path / "last.ckpt"
    torch.save({"epoch": 3, "global_step": 12, "hyper_parameters": {"dir": Path("x")}}, ckpt)
    assert (checkpoint_value(ckpt, "epoch"), checkpoint_value(ckpt, "global_step")) == (3, 12)


def test_a_failed_write_keeps_the_old_file_and_leaves_no_partial(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text("kept")

    def fail(partial):
        partial.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, fail)
    assert path.read_text() == "kept"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_next_attempt_takes_the_first_free_name(tmp_path):
    path = tmp_path / "metrics.json"
    assert next_attempt(path) == (1, tmp_path / "metrics.attempt1.json")
    (tmp_path / "metrics.attempt1.json").write_text("{}")
    (tmp_path / "metrics.attempt3.json").write_text("{}")
    assert next_attempt(path) == (2, tmp_path / "metrics.attempt2.json")


def test_not_a_folder_names_the_file_in_the_way(tmp_path):
    afile = tmp_path / "notes.txt"
    afile.write_text("x")
    assert not_a_folder(tmp_path) is None
    assert not_a_folder(tmp_path / "new" / "deeper") is None  # can be made
    assert not_a_folder(afile) == afile
    assert not_a_folder(afile / "sub" / "dir") == afile


def test_writers_in_two_processes_keep_their_partial_files_apart(tmp_path, monkeypatch):
    """Two sweep jobs (or DDP ranks) writing the same file at once: each fills its own partial,
    so neither replaces the file with the other's half-written one."""
    path = tmp_path / "metrics.json"
    monkeypatch.setattr(files.os, "getpid", lambda: 111)

    def first(partial):
        partial.write_text("first")
        monkeypatch.setattr(files.os, "getpid", lambda: 222)  # the other process writes meanwhile
        write_atomically(path, lambda other: other.write_text("second"))

    write_atomically(path, first)
    assert path.read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_not_a_folder_expands_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "notes.txt").write_text("x")
    assert not_a_folder(Path("~/notes.txt/runs")) == tmp_path / "notes.txt"
