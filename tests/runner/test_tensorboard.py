"""TensorBoard over a finished run: the scalars, images (attention) and hparams plugins list its tags."""

import json
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from cli_helpers import TINY, run_cli_in_process

XSRF = {"X-XSRF-Protected": "1", "Content-Type": "application/json"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fetch(url: str, body: dict | None = None, timeout: float = 10):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=XSRF if data else {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


@pytest.fixture
def tensorboard(tmp_path):
    """(base url, run name, run dir) of TensorBoard serving a finished tiny run, beside an earlier
    run of another model (the HPARAMS tab must show both runs' settings and metrics)."""
    result = run_cli_in_process(tmp_path, *TINY, "model=bag_mlp")
    assert result.returncode == 0, result.stderr[-4000:]
    result = run_cli_in_process(tmp_path, *TINY, "trainer.max_epochs=2")
    assert result.returncode == 0, result.stderr[-4000:]
    run_dir = max((tmp_path / "outputs" / "runs").iterdir())  # named by start time: the later
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(tmp_path / "outputs"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--load_fast",
            "false",
            "--reload_interval",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base, run = f"http://127.0.0.1:{port}", f"runs/{run_dir.name}/tb"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                # the first load has finished once the images plugin sees the figure
                if run in fetch(f"{base}/data/runs", timeout=2) and run in fetch(
                    f"{base}/data/plugin/images/tags", timeout=5
                ):
                    break
            except OSError:
                pass
            if proc.poll() is not None:
                pytest.fail(f"tensorboard exited: {proc.stderr.read()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("tensorboard did not list the run within 90 s")
            time.sleep(0.5)
        yield base, run, Path(run_dir)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_tensorboard_lists_scalars_images_and_hparams(tensorboard):
    base, run, run_dir = tensorboard
    scalars = fetch(f"{base}/data/plugin/scalars/tags")[run]
    expected = {"train/loss_epoch", "val/acc", "val/loss", "test/acc", "test/acc_variable"}
    assert expected | {"test/acc_bag1", "test/acc_bag3"} <= set(scalars)  # TINY's bag sizes
    assert "hp_metric" not in scalars  # no stuck placeholder metric
    images = fetch(f"{base}/data/plugin/images/tags")[run]
    (tag,) = [tag for tag in images if "attention" in tag]
    query = urllib.parse.urlencode({"run": run, "tag": tag})
    figures = fetch(f"{base}/data/plugin/images/images?{query}")
    assert len(figures) == 2  # one per validation epoch (trainer.max_epochs=2)

    # The columns are every run's: TensorBoard took them from the first experiment summary it
    # found (the MLP run's, without scorer, attention or variable bags) while Lightning wrote one
    experiment = fetch(f"{base}/data/plugin/hparams/experiment", {"experimentName": ""})
    hparams = {h["name"] for h in experiment["hparamInfos"]}
    assert {"model._target_", "model.hidden_size", "scorer._target_", "seed"} <= hparams
    assert "model.attention" in hparams  # bag_attn's own setting
    assert {"choice.model", "choice.scorer", "data_source"} <= hparams  # what tells runs apart
    noise = {"trainer.default_root_dir", "trainer.enable_progress_bar", "task.optimizer._target_"}
    noise |= {"model.scorer._target_"}
    assert not noise & hparams  # differs per run, or repeats optimizer.* / scorer.*
    metric_tags = {m["name"]["tag"] for m in experiment["metricInfos"]}
    assert {"final/val/acc_best", "final/test/acc", "final/test/acc_variable"} <= metric_tags

    groups = fetch(
        f"{base}/data/plugin/hparams/session_groups",
        {
            "experimentName": "",
            "startIndex": 0,
            "sliceSize": 10,
            "colParams": [],
            "allowedStatuses": [
                "STATUS_UNKNOWN",
                "STATUS_SUCCESS",
                "STATUS_FAILURE",
                "STATUS_RUNNING",
            ],
        },
    )["sessionGroups"]
    (group,) = [g for g in groups if g["name"] == run]
    assert group["hparams"]["model.hidden_size"] == 16
    assert (
        group["hparams"]["choice.model"] == "bag_attn"
        and group["hparams"]["data_source"] == "sample"
    )
    values = {m["name"]["tag"]: m["value"] for m in group["metricValues"]}
    record = json.loads((run_dir / "metrics.json").read_text())["metrics"]
    assert values["final/test/acc"] == pytest.approx(record["test/acc"])
    # tb/hparams.yaml holds the settings (Lightning wrote it before they were logged: empty)
    assert "model.hidden_size: 16" in (run_dir / "tb" / "hparams.yaml").read_text().splitlines()


def test_attention_figures_every_zero_epochs_is_refused_before_training(tmp_path):
    result = run_cli_in_process(tmp_path, *TINY, "callbacks.attention_figures.every_n_epochs=0")
    assert result.returncode == 2, result.stderr[-4000:]
    assert "error: callbacks.attention_figures.every_n_epochs=0 must be a whole number >= 1" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "outputs").exists()  # refused by the command line, before a run dir
