"""trainer.threads: what auto picks, what an int and OMP_NUM_THREADS do, and the refusal."""

import pytest

from attnexp.errors import ConfigError
from attnexp.runner import threads


@pytest.mark.parametrize(
    ("cores", "load", "expected"),
    [(2, 0.1, 2), (2, 1.0, 1), (2, 9.5, 1), (16, 3.2, 13), (1, 0.0, 1), (4, 0.6, 3)],
)
def test_auto_takes_the_cores_the_load_leaves_free(cores, load, expected):
    assert threads.auto_threads(cores, load) == expected


def test_the_environment_wins(monkeypatch):
    count, why = threads.choose_threads(3, on_cpu=True, environ={"OMP_NUM_THREADS": "1"})
    assert count is None and "OMP_NUM_THREADS=1" in why


def test_an_int_sets_the_count():
    assert threads.choose_threads(3, on_cpu=True, environ={})[0] == 3


def test_auto_reads_cores_and_load(monkeypatch):
    monkeypatch.setattr(threads, "available_cores", lambda: 8)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (6.2, 0.0, 0.0))
    count, why = threads.choose_threads("auto", on_cpu=True, environ={})
    assert count == 2 and "8 cores" in why and "6.2" in why


def test_auto_leaves_an_accelerator_run_alone():
    assert threads.choose_threads("auto", on_cpu=False, environ={})[0] is None


@pytest.mark.parametrize("bad", [0, -2, "many", 1.5, True])
def test_a_bad_setting_is_refused(bad):
    with pytest.raises(ConfigError, match=r"trainer\.threads=.*'auto'.*set trainer\.threads="):
        threads.check_threads(bad)


def test_set_threads_applies_and_reports(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        assert threads.set_threads(1, on_cpu=True) == 1 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
