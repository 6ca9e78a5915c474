"""Sweep jobs running at once (hydra/launcher=parallel): each in its own process and run dir, with
its own lock, log, checkpoints and metrics.json, and the sweep's report reads them all."""

import csv
import json

import pytest
import torch
from cli_helpers import TINY, run_cli

from attnexp.runs import report
from attnexp.runs.lock import OWNER_FILE

# importorskip, not find_spec: find_spec of a dotted name imports the parent, and no other plugin
# may have made the hydra_plugins package
pytest.importorskip("hydra_plugins.hydra_joblib_launcher", reason="pip install -e '.[sweep]'")


ON_GPU = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")]


@pytest.mark.parametrize("accelerator", ["cpu", pytest.param("gpu", marks=ON_GPU)])
def test_two_jobs_at_once_each_keep_their_own_run(tmp_path, accelerator):
    """On a GPU the two jobs share the device, each with its own CUDA context."""
    sweep = tmp_path / "sweep"
    launcher = ["hydra/launcher=parallel", "hydra.launcher.n_jobs=2"]
    # logger=csv on the GPU: the GPU machine's Python may lack tensorboard
    device = [
        f"trainer.accelerator={accelerator}",
        *(["logger=csv"] if accelerator == "gpu" else []),
    ]
    result = run_cli(
        tmp_path, "-m", *launcher, "seed=0,1", *TINY, *device, f"hydra.sweep.dir={sweep}"
    )
    assert result.returncode == 0, result.stderr[-4000:]
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [job.name for job in jobs] == ["0_seed=0", "1_seed=1"]
    records = [json.loads((job / "metrics.json").read_text()) for job in jobs]
    assert [r["status"] for r in records] == ["completed", "completed"]
    assert [r["seed"] for r in records] == [0, 1]
    assert {r["device"].split(":")[0] for r in records} == {
        "cpu" if accelerator == "cpu" else "cuda"
    }
    assert records[0]["pid"] != records[1]["pid"]  # two worker processes, not one after the other
    for job, other in (jobs, jobs[::-1]):
        log = (job / "train.log").read_text()
        assert f"run dir: {job}" in log and str(other) not in log  # no job logs into another's
        assert (job / "checkpoints" / "last.ckpt").is_file()
        assert not (job / OWNER_FILE).exists()  # each released its run dir's lock
    rows = list(csv.DictReader(report.write_report(sweep)["csv"].open()))
    assert sorted(row["status"] for row in rows) == ["completed", "completed"]
    for row, record in zip(sorted(rows, key=lambda r: r["run"]), records, strict=True):
        assert float(row["test/acc"]) == pytest.approx(record["metrics"]["test/acc"], abs=0)
