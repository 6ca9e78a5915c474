"""Smoke tests of the benchmark scripts on embedded or generated data (a handful of batches)."""

import json
import runpy
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "bench"


def run_bench(script: str, monkeypatch, out: Path, *args: str) -> dict:
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts import bench/benchkit.py
    argv = [str(BENCH / script), "--batches", "2", "--warmup", "1", "--rounds", "2"]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(out), *args])
    runpy.run_path(str(BENCH / script), run_name="__main__")
    return json.loads(out.read_text())


def check_timing(result: dict) -> None:
    assert result["rounds"] == 2
    assert len(result["plain_per_s_rounds"]) == len(result["runner_per_s_rounds"]) == 2
    assert result["plain_per_s"] > 0 and result["runner_per_s"] > 0
    assert result["ratio_q1"] <= result["ratio_median"] <= result["ratio_q3"]


@pytest.mark.parametrize("flags", [[], ["--plain-metrics", "--bare"]])
def test_bench_bag_mnist(tmp_path, monkeypatch, flags):
    result = run_bench(
        "bench_bag_mnist.py", monkeypatch, tmp_path / "bench.json",
        "--data-dir", str(tmp_path), "--threads", "1", *flags,
    )  # fmt: skip
    assert result["data_source"] == "sample"
    assert result["runner"].startswith("bare" if "--bare" in flags else "ClassificationTask")
    assert result["machine"]["torch_threads"] == 1  # the ratio is this machine's: it says which
    check_timing(result)


def test_bench_imdb(tmp_path, monkeypatch):
    result = run_bench(
        "bench_imdb.py", monkeypatch, tmp_path / "bench.json",
        "--batch-size", "8", "--max-seq-len", "32", "--cache-dir", str(tmp_path / "cache"),
    )  # fmt: skip
    assert result["data_source"] == "sample" and result["batch_size"] == 8
    assert result["tokenization"]["encode_reviews_per_s"] > 0
    check_timing(result)


def test_bench_lcqmc(tmp_path, monkeypatch):
    result = run_bench(
        "bench_lcqmc.py", monkeypatch, tmp_path / "bench.json",
        "--hidden", "16", "--heads", "2", "--ffn", "32", "--depth", "1", "--threads", "1",
    )  # fmt: skip
    assert result["data"] == "generated"
    assert set(result["rows"]) == {
        "custom + SDPA", "custom, explicit softmax", "torch TransformerEncoderLayer"
    }  # fmt: skip
    for row in result["rows"].values():
        check_timing(row)


def test_bench_overhead(tmp_path, monkeypatch):
    result = run_bench("bench_overhead.py", monkeypatch, tmp_path / "bench.json", "--threads", "1")
    assert result["plain_us_per_step"] > 0 and result["runner_us_per_step"] > 0
    check_timing(result)
