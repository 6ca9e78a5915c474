"""Smoke test of the bag-MNIST benchmark script on the embedded sample (a handful of batches)."""

import json
import runpy
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "bench" / "bench_bag_mnist.py"


@pytest.mark.parametrize("flags", [[], ["--plain-metrics", "--bare"]])
def test_bench_bag_mnist_runs(tmp_path, monkeypatch, flags):
    out = tmp_path / "bench.json"
    argv = [str(BENCH), "--data-dir", str(tmp_path), "--batches", "2", "--warmup", "1"]
    monkeypatch.setattr(
        sys, "argv", [*argv, "--repeats", "1", "--threads", "1", "--out", str(out), *flags]
    )
    runpy.run_path(str(BENCH), run_name="__main__")
    result = json.loads(out.read_text())
    assert result["data_source"] == "sample"
    assert result["plain_bags_s"] > 0 and result["runner_bags_s"] > 0
    assert result["runner"].startswith("bare" if "--bare" in flags else "ClassificationTask")
