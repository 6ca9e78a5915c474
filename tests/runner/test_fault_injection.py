"""Killed with SIGKILL at 22 points of training, validation, checkpoint saving and testing, and
resumed each time, a run ends with exactly the metrics of the same run never interrupted."""

import pytest

from tests.fault_injection import POINTS, run_all, table


@pytest.mark.slow
def test_every_resumed_run_ends_as_the_uninterrupted_one(tmp_path):
    _, rows = run_all(POINTS, workdir=tmp_path)
    assert all(r["killed"] for r in rows), table(rows)
    assert all(r["equal"] for r in rows), table(rows)
