"""Smoke tests of the benchmark scripts on embedded or generated data (a handful of batches)."""

import json
import runpy
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from attnexp.runner.cpu_kernels import runs_in_bf16

ON_GPU = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")]
ON_CUDA_BF16 = ["--device", "cuda", "--precision", "bf16-mixed"]

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


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--plain-metrics", "--bare"],
        pytest.param(["--plain-metrics", *ON_CUDA_BF16], marks=ON_GPU),
    ],
)
def test_bench_bag_mnist(tmp_path, monkeypatch, flags):
    result = run_bench(
        "bench_bag_mnist.py", monkeypatch, tmp_path / "bench.json",
        "--data-dir", str(tmp_path), "--threads", "1", *flags,
    )  # fmt: skip
    assert result["data_source"] == "sample"
    assert result["runner"].startswith("bare" if "--bare" in flags else "ClassificationTask")
    assert result["machine"]["torch_threads"] == 1  # the ratio is this machine's: it says which
    expected = ("cuda", "bf16-mixed") if "--device" in flags else ("cpu", "32-true")
    assert (result["device"], result["precision"]) == expected
    check_timing(result)


@pytest.mark.parametrize("flags", [[], pytest.param(ON_CUDA_BF16, marks=ON_GPU)])
def test_bench_imdb(tmp_path, monkeypatch, flags):
    result = run_bench(
        "bench_imdb.py", monkeypatch, tmp_path / "bench.json",
        "--batch-size", "8", "--max-seq-len", "32", "--cache-dir", str(tmp_path / "cache"), *flags,
    )  # fmt: skip
    assert result["data_source"] == "sample" and result["batch_size"] == 8
    tokenization = result["tokenization"]
    assert tokenization["max_seq_len"] == 32  # the flag's, as the timed batches'
    assert all(
        tokenization[k] > 0 for k in ("encode_reviews_per_s", "map_to_cache_s", "cache_hit_s")
    )
    check_timing(result)


@pytest.mark.parametrize("flags", [[], pytest.param(ON_CUDA_BF16, marks=ON_GPU)])
def test_bench_lcqmc(tmp_path, monkeypatch, flags):
    result = run_bench(
        "bench_lcqmc.py", monkeypatch, tmp_path / "bench.json",
        "--hidden", "16", "--heads", "2", "--ffn", "32", "--depth", "1", "--threads", "1", *flags,
    )  # fmt: skip
    assert result["device"] == ("cuda" if flags else "cpu")
    assert result["data"] == "generated"
    assert set(result["rows"]) == {
        "custom + SDPA", "custom, explicit softmax", "torch TransformerEncoderLayer"
    }  # fmt: skip
    for row in result["rows"].values():
        check_timing(row)


@pytest.mark.parametrize("flags", [[], pytest.param(ON_CUDA_BF16, marks=ON_GPU)])
def test_bench_translation(tmp_path, monkeypatch, flags):
    result = run_bench(
        "bench_translation.py", monkeypatch, tmp_path / "bench.json",
        "--batch-size", "16", "--hidden", "16", "--decode-batches", "1", "--decode-rounds", "2",
        "--decode-batch-size", "32", "--max-len", "5", "--cache-dir", str(tmp_path / "cache"),
        "--threads", "1", *flags,
    )  # fmt: skip
    assert result["data_source"] == "sample" and result["batch_size"] == 16
    assert (result["device"] == "cpu") == (not flags)  # on CUDA: the card's name
    check_timing(result)
    decoding = result["decoding"]
    assert 0 < decoding["sentences"] <= 32 and decoding["max_len"] == 5
    for way in ("greedy", "beam5"):
        assert decoding[f"{way}_sentences_per_s"] > 0
        assert len(decoding[f"{way}_sentences_per_s_rounds"]) == 2  # --decode-rounds
        assert 0 <= decoding[f"{way}_mean_tokens"] < 5  # EOS ends every translation by max_len


def test_bench_overhead(tmp_path, monkeypatch):
    result = run_bench("bench_overhead.py", monkeypatch, tmp_path / "bench.json", "--threads", "1")
    assert result["plain_us_per_step"] > 0 and result["runner_us_per_step"] > 0
    check_timing(result)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_bench_on_cuda_without_cuda_says_so(tmp_path, monkeypatch):
    with pytest.raises(SystemExit, match="--device cuda: torch sees no CUDA device here"):
        run_bench("bench_lcqmc.py", monkeypatch, tmp_path / "bench.json", *ON_CUDA_BF16)


def test_bench_lstm_impl(tmp_path, monkeypatch):
    result = run_bench(
        "bench_lstm_impl.py",
        monkeypatch,
        tmp_path / "bench.json",
        "--batch-size",
        "4",
        "--length",
        "12",
        "--threads",
        "1",
    )
    assert set(result["seconds_per_step"]) == {"packed", "reversed", "padded"}
    assert all(len(v) == 2 for v in result["seconds_per_step_rounds"].values())
    assert result["packed_over_reversed"] > 0 and result["machine"]["torch_threads"] == 1


@pytest.mark.parametrize("flags", [[], pytest.param(ON_CUDA_BF16, marks=ON_GPU)])
def test_bench_attention_weights(tmp_path, monkeypatch, flags):
    result = run_bench(
        "bench_attention_weights.py",
        monkeypatch,
        tmp_path / "bench.json",
        *("--batch-size", "3", "--length", "10", "--width", "8", "--heads", "2", "--threads", "1"),
        *flags,
    )
    assert set(result["seconds_per_forward"]) == {"attnexp", "torch", "unfused", "fused"}
    assert all(len(v) == 2 for v in result["seconds_per_forward_rounds"].values())
    assert result["torch_over_attnexp"] > 0 and result["machine"]["torch_threads"] == 1


@pytest.fixture
def bench_importable(monkeypatch):
    """bench/ on sys.path, so that its scripts and benchkit import as modules."""
    monkeypatch.syspath_prepend(str(BENCH))


@pytest.mark.usefixtures("bench_importable")
def test_the_bag_bench_trains_a_runs_model(compose_cfg):
    """It built context attention without the book's head (no BatchNorm on the pooled vector),
    which a run of model=bag_attn has."""
    from bench_bag_mnist import make_model

    from attnexp.data.bag_mnist import BagMNISTDataModule
    from attnexp.runner.build import build_model

    dm = BagMNISTDataModule("nowhere", source="sample", bag_size=3)
    dm.setup("fit")
    cfg = compose_cfg("model=bag_attn", "scorer=additive", "model.hidden_size=256")
    assert str(make_model(dm, 256)) == str(build_model(cfg.model, dm))


@pytest.mark.usefixtures("bench_importable")
def test_the_plain_window_times_what_the_runners_does():
    """From batch `warmup`, fetched and prepared, to the end of the last timed step: it also
    timed one more fetch (and the first batch's preparation) than the runner's window."""
    import benchkit

    fetched = []

    def loader():
        for i in range(10):
            fetched.append(i)
            yield {"labels": torch.zeros(4)}

    timed = benchkit.PlainWindow(warmup=2, batches=3)
    steps = [batch for batch in timed.window(loader(), lambda batch: batch)]
    assert len(steps) == 5 and fetched == [0, 1, 2, 3, 4]  # no fetch after the last timed batch
    assert timed.samples == 12 and timed.rate > 0


@pytest.mark.usefixtures("bench_importable")
def test_quartiles_stay_within_the_measured_ratios():
    import benchkit

    result = benchkit.summarize([100.0, 100.0], [90.0, 100.0])  # ratios 0.9 and 1.0
    assert 0.9 <= result["ratio_q1"] <= result["ratio_median"] <= result["ratio_q3"] <= 1.0


@pytest.mark.usefixtures("bench_importable")
def test_the_attention_weights_bench_refuses_ways_that_disagree(monkeypatch):
    """A timing of a way that computes something else would compare nothing."""
    import bench_attention_weights

    monkeypatch.setattr(bench_attention_weights, "unfused", lambda layer, x, mask: x)
    monkeypatch.setattr(sys, "argv", ["bench", "--batch-size", "2", "--length", "6"])
    with pytest.raises(SystemExit, match="unfused gives other outputs than attnexp's MHSA"):
        bench_attention_weights.main()


def test_bench_gpu_runs_every_way_on_cpu(tmp_path, monkeypatch):
    """bench_gpu.py's cases on the CPU (no profile, no graph): runner, plain and floor, today's
    setup beside the new one, one JSON row and one table line each."""
    monkeypatch.syspath_prepend(str(BENCH))
    out, table = tmp_path / "gpu.json", tmp_path / "gpu.md"
    argv = ["bench_gpu.py", "--workloads", "bags", "--warmup", "1", "--steps", "1"]
    argv += ["--rounds", "1", "--no-compile", "--threads", "1", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", [*argv, "--table", str(table)])
    runpy.run_path(str(BENCH / "bench_gpu.py"), run_name="__main__")
    rows = json.loads(out.read_text())["rows"]
    assert [(r["way"], r["setup"]) for r in rows] == [
        ("runner", "today"), ("runner", "new"), ("plain", "today"), ("plain", "new"),
        ("floor", "new"),
    ]  # fmt: skip
    assert all(r["per_s"] > 0 and r["unit"] == "bags/s" for r in rows)
    assert table.read_text().count("| bags |") == 5


def run_script(script: str, monkeypatch, *args: str) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.setattr(sys, "argv", [str(BENCH / script), *args])
    runpy.run_path(str(BENCH / script), run_name="__main__")


def test_bench_parallel_jobs(tmp_path, monkeypatch):
    """One sweep one job at a time and one of jobs at once (here K=1: the launcher's path),
    real runs on the embedded bags; each row from the jobs' own records."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher", reason="pip install -e '.[sweep]'")
    out, table = tmp_path / "jobs.json", tmp_path / "jobs.md"
    run_script(
        "bench_parallel_jobs.py", monkeypatch, "--workloads", "bags", "--jobs", "1",
        "--steps", "2", "--warmup", "1", "--batch-size", "16", "--keep", str(tmp_path / "runs"),
        "--extra", "model.hidden_size=8", "--out", str(out), "--table", str(table),
    )  # fmt: skip
    rows = json.loads(out.read_text())["rows"]
    assert [(r["launcher"], r["K"]) for r in rows] == [("one at a time", 1), ("parallel", 1)]
    for row in rows:
        assert row["failed"] == [] and "error" not in row
        assert row["wall_s"] > 0 and row["aggregate_per_s"] > 0
        (rate,) = row["job_per_s"]
        assert rate == row["job_per_s_median"]
    assert rows[0]["sum_of_job_rates"] is None  # one at a time: no rates to add up
    assert rows[1]["sum_of_job_rates"] == rows[1]["job_per_s_median"]
    assert rows[1]["speedup_wall"] == round(rows[0]["wall_s"] / rows[1]["wall_s"], 2)
    windows = sorted((tmp_path / "runs").glob("*/*/train_window.json"))
    assert len(windows) == 2
    for window in map(json.loads, (w.read_text() for w in windows)):
        assert window["samples"] == 2 * 16 and window["batches"] == 3  # 1 untimed, 2 timed
    assert table.read_text().count("| bags |") == 2


def test_bench_lstm_precision(tmp_path, monkeypatch):
    """Every precision x seed a real run of the tuned IMDB recipe (toy sizes, the embedded
    sample); the verdict is against fp32's seeds."""
    if not runs_in_bf16(nn.LSTM, mixed=True):
        pytest.skip(
            f"this CPU (torch's CPU capability {torch.backends.cpu.get_cpu_capability()}) has no "
            f"bfloat16 LSTM kernel: bf16-mixed LSTM runs are refused here"
        )
    out, table = tmp_path / "precision.json", tmp_path / "precision.md"
    run_script(
        "bench_lstm_precision.py", monkeypatch, "--precisions", "32-true,bf16-mixed",
        "--seeds", "2", "--steps", "2", "--warmup", "1", "--batch-size", "16",
        "--keep", str(tmp_path / "runs"), "--out", str(out), "--table", str(table), "--extra",
        "model.hidden_size=8", "model.embed_dim=8", "data.max_seq_len=32",
        "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
    )  # fmt: skip
    result = json.loads(out.read_text())
    assert result["failed"] == [] and result["returncode"] == 0
    rows = result["precisions"]
    assert set(rows) == {"32-true", "bf16-mixed"}
    for row in rows.values():
        assert sorted(row["seeds"]) == [0, 1] and row["ms_per_step"] > 0
        assert row["keeps_accuracy"] == (
            row["test_acc_mean"] >= min(rows["32-true"]["test_acc_by_seed"])
        )
    assert result["fastest_keeping_accuracy"] in rows
    assert "fastest that keeps accuracy: " in table.read_text()


@pytest.mark.usefixtures("bench_importable")
def test_the_precision_verdict_takes_the_fastest_that_keeps_accuracy():
    from bench_lstm_precision import summarize

    def job(precision, seed, per_s, acc):
        window = {"precision": precision, "per_s": per_s}
        return {"status": "completed", "window": window, "seed": seed, "test_acc": acc}

    jobs = [job("32-true", 0, 100.0, 0.80), job("32-true", 1, 100.0, 0.84)]
    jobs += [job("bf16-mixed", 0, 200.0, 0.81), job("bf16-mixed", 1, 200.0, 0.81)]
    jobs += [job("16-mixed", 0, 400.0, 0.70), job("16-mixed", 1, 400.0, 0.72)]
    result = summarize(jobs, batch_size=100)
    assert result["precisions"]["16-mixed"]["keeps_accuracy"] is False  # fastest, but worse
    assert result["precisions"]["bf16-mixed"]["ms_per_step"] == 500.0
    assert result["fastest_keeping_accuracy"] == "bf16-mixed"


def test_bench_text_staging(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a Trainer without a root dir would write
    out = tmp_path / "staging.json"
    run_script(
        "bench_text_staging.py", monkeypatch, "--steps", "2", "--warmup", "1", "--rounds", "2",
        "--batch-size", "8", "--max-seq-len", "16", "--threads", "1", "--out", str(out),
    )  # fmt: skip
    result = json.loads(out.read_text())
    assert result["data_source"] == "sample" and result["device"] == "CPU"
    assert all(len(rates) == 2 for rates in result["rounds"].values())
    assert result["pinned_per_s"] > 0 and result["pageable_per_s"] > 0
    assert [p.name for p in tmp_path.iterdir()] == ["staging.json"]  # no stray files


def test_every_gpu_mode_is_documented():
    """bench/run_gpu.sh's modes (its part_* functions) are the rows of the table that tells a
    GPU session what to run (docs/benchmarks.md)."""
    import re

    script = (BENCH / "run_gpu.sh").read_text()
    modes = set(re.findall(r"^part_(\w+)\(\) \{", script, flags=re.MULTILINE))
    docs = (BENCH.parent / "docs" / "benchmarks.md").read_text()
    section = docs[docs.index("### What a GPU session runs") :]
    section = section[: section.index("\n### ", 1)]
    documented = set(re.findall(r"^\| `(\w+)`", section, flags=re.MULTILINE))
    assert modes == documented
    for mode in modes:
        assert re.search(rf"^# {mode}:", script, flags=re.MULTILINE), mode  # the script's header


@pytest.mark.slow  # tokenizes the embedded IMDB sample (~10 s on a busy machine)
def test_bench_explain_times_each_measure(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(BENCH))
    out = tmp_path / "explain.json"
    argv = ["--reviews", "2", "--batch-size", "2", "--ig-steps", "2", "--max-seq-len", "16"]
    monkeypatch.setattr(sys, "argv", [str(BENCH / "bench_explain.py"), *argv, "--out", str(out)])
    runpy.run_path(str(BENCH / "bench_explain.py"), run_name="__main__")
    result = json.loads(out.read_text())
    assert result["reviews"] == 2 and result["reviews_per_s"] > 0
    assert set(result["seconds"]) == {
        "gradient_x_input", "integrated_gradients", "leave_one_out", "permutation", "erasure"
    }  # fmt: skip
