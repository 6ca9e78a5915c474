"""Preemption end to end, through submitit on this machine (hydra/launcher=submitit_local): a
2-job sweep whose job 0 gets submitit's preemption signal in the middle of an epoch; submitit
requeues it, it continues its own run, and ends with the metrics of job 1, never interrupted."""

import json
from pathlib import Path

import fault_injection
import pytest
from cli_helpers import run_cli

from attnexp.runs import report

HERE = Path(__file__).resolve().parents[1]  # tests/: the signalling callback's module

# model=bag_attn has no dropout: the run does not depend on the RNG state a checkpoint keeps. 3
# epochs of 6 batches, a validation (and last.ckpt) every 3 batches; the signal comes at the end
# of batch 4, between two validations. The jobs differ in their logger only.
RUN = [*fault_injection.FAMILIES["bags"].overrides, "callbacks.attention_figures=null"]


# ddp_spawn: rank 0's worker signals the job's process (its parent), where the signal lands; the
# ranks stop where they are and the run continues from its last validation's checkpoint.
SPAWNED = ["trainer=ddp_cpu", "data.eval_variable_max=0", "data.eval_bag_sizes=[2]"]


@pytest.mark.parametrize(
    "spawned", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["in-process", "ddp_spawn"]
)
def test_a_preempted_job_is_requeued_and_ends_as_if_never_stopped(tmp_path, monkeypatch, spawned):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="pip install -e '.[sweep]'")
    monkeypatch.setenv("PYTHONPATH", str(HERE))
    monkeypatch.delenv("SUBMITIT_PREEMPT_SIGNAL", raising=False)
    sweep = tmp_path / "sweep"
    signal_once = [
        "+callbacks.preempt._target_=preemption_helpers.SignalOnce",
        "+callbacks.preempt.at_batch=4",
        "+callbacks.preempt.only_job=0",
        f"+callbacks.preempt.marker={tmp_path / 'signalled'}",
        f"+callbacks.preempt.parent={spawned}",
    ]
    result = run_cli(
        tmp_path,
        "-m",
        "hydra/launcher=submitit_local",
        f"hydra.sweep.dir={sweep}",
        *RUN,
        *(SPAWNED if spawned else []),
        "logger=csv,tensorboard",
        *signal_once,
        timeout=900 if spawned else 300,  # 4 processes at once under ddp_spawn
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert (tmp_path / "signalled").is_file()
    preempted, straight = (sweep / "0_logger=csv"), (sweep / "1_logger=tensorboard")

    first = json.loads((preempted / "metrics.attempt1.json").read_text())
    assert first["status"] == "failed" and "stopped on SIGUSR2" in first["error"]
    if not spawned:  # stopped between two validations
        assert [v["step"] for v in first["validations"]] == [3]
    records = [json.loads((d / "metrics.json").read_text()) for d in (preempted, straight)]
    assert [r["status"] for r in records] == ["completed", "completed"]
    assert records[0]["resumed_from_attempt"] == 1 and "resumed_from_attempt" not in records[1]
    assert records[0]["scheduler_job"] == first["scheduler_job"]  # the same job, requeued
    assert records[0]["scheduler_job"]["scheduler"] == "submitit-local"
    # Under DDP a checkpoint keeps rank 0's train metric states only: the train/* aggregates of
    # the epoch a rank was stopped in (epoch 0 here, not the final one) count rank 0's batches
    # before the stop twice.
    for key in ("metrics", "validations", *([] if spawned else ["history"])):
        assert records[0][key] == records[1][key], key
    assert not list(straight.glob("metrics.attempt*.json"))
    log = (preempted / "train.log").read_text()
    assert "the job was requeued: continuing its run" in log
    assert spawned or "global step 4" in log

    # the report reads the jobs of a submitit sweep as any other's
    written = report.write_report(sweep)
    assert written["csv"].read_text().count("completed") == 2
    assert list((sweep / ".submitit").glob("*/*_log.out"))  # submitit's own logs, per job
