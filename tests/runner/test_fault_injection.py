"""Killed with SIGKILL at many points of training, validation, checkpoint saving and testing, and
resumed each time, a run of every model family ends with exactly the metrics of the same run never
interrupted, val/*_last included (the slow tests); a few of those points, interrupted in this
process, in the default suite."""

import pytest

from tests.fault_injection import FAMILIES, run_family, table

QUICK = [name for name, family in FAMILIES.items() if family.quick]


@pytest.mark.slow
@pytest.mark.parametrize("name", FAMILIES)
def test_every_resumed_run_ends_as_the_uninterrupted_one(tmp_path, name):
    _, rows = run_family(FAMILIES[name], workdir=tmp_path)
    assert all(r["killed"] for r in rows), table([{"family": name, **r} for r in rows])
    assert all(r["equal"] for r in rows), table([{"family": name, **r} for r in rows])


@pytest.mark.parametrize("name", QUICK)
def test_an_interrupted_run_resumes_exactly(tmp_path, name):
    """seq2seq (dropout, sampled teacher forcing), resumed mid-way through its last epoch: the
    random state and the epoch's train sums come back with the checkpoint. The bags whose last
    validation is mid-epoch: val/*_last survive a resume that trains past it without validating
    again."""
    family = FAMILIES[name]
    _, rows = run_family(family, family.quick, workdir=tmp_path, in_process=True)
    assert all(r["killed"] and r["then"] == "resumed" for r in rows), rows
    assert all(r["equal"] for r in rows), table([{"family": name, **r} for r in rows])
