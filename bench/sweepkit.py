"""Sweeps of real runner jobs (`python -m attnexp -m ...`), timed from the outside and from
inside each job: shared by bench_parallel_jobs.py and bench_lstm_precision.py.

Each job gets one extra callback, `TrainWindow` (`+callbacks.train_window=...`, so the job is
otherwise the run a user starts): it times the job's training batches from its `warmup`-th on,
leaving out validation and epoch-end work (checkpoints, figures), and writes
`<run dir>/train_window.json` at each stage's end. The sweep's wall time is measured around the
process, so it also holds imports, data setup, validation and test. The jobs log to CSV
(`logger=csv`): a GPU machine's Python may lack tensorboard, and without a TensorBoard logger no
attention figures are drawn.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytorch_lightning as pl

BENCH_DIR = Path(__file__).resolve().parent
WINDOW_FILE = "train_window.json"


def clock(device_type: str) -> float:
    """perf_counter, after the queued GPU work on CUDA (a window ends when its kernels do)."""
    if device_type == "cuda":
        import torch

        torch.cuda.synchronize()
    return time.perf_counter()


class TrainWindow(pl.Callback):
    """Training time and samples (`labels`) of one job from its `warmup`-th training batch on.

    Time runs from a batch's start to the next validation, epoch end or fit end, so validation,
    checkpoints and figures are out; `first_wall` / `last_wall` (time.time()) place the window
    among the other jobs' and `finished_wall` is when the job's last stage (test) ended."""

    def __init__(self, warmup: int = 10, write: bool = True) -> None:
        self.warmup, self.batches, self.samples, self.seconds = warmup, 0, 0, 0.0
        self.write = write  # False: only read in the process (no run dir to write into)
        self.opened: float | None = None
        self.first_wall: float | None = None
        self.last_wall: float | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.batches >= self.warmup and self.opened is None:
            self.opened = clock(pl_module.device.type)
            self.first_wall = self.first_wall or time.time()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.opened is not None:
            self.samples += len(batch["labels"])
        self.batches += 1

    def close(self, trainer, pl_module) -> None:
        if self.opened is not None:
            self.seconds += clock(pl_module.device.type) - self.opened
            self.opened, self.last_wall = None, time.time()

    on_validation_start = on_train_epoch_end = on_train_end = close

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if not self.write:
            return
        record = {
            "warmup": self.warmup, "batches": self.batches, "samples": self.samples,
            "seconds": self.seconds, "per_s": self.samples / self.seconds if self.seconds else None,
            "first_wall": self.first_wall, "last_wall": self.last_wall,
            "finished_wall": time.time(), "device": str(pl_module.device),
            "precision": str(trainer.precision),
        }  # fmt: skip
        Path(trainer.default_root_dir, WINDOW_FILE).write_text(json.dumps(record) + "\n")


def run_sweep(
    overrides: list[str], sweep_dir: Path, warmup: int, timeout_s: float, log: Path | None = None
) -> dict:
    """`python -m attnexp -m <overrides>` into `sweep_dir`, each job with a TrainWindow; returns
    {"launched": time.time() at the start, "wall_s", "returncode", "jobs": read_jobs(...)}."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(BENCH_DIR), *filter(None, [os.environ.get("PYTHONPATH")])]
    ), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}  # fmt: skip
    command = [
        sys.executable, "-m", "attnexp", "-m", *overrides, f"hydra.sweep.dir={sweep_dir}",
        "+callbacks.train_window._target_=sweepkit.TrainWindow",
        f"+callbacks.train_window.warmup={warmup}", "trainer.enable_progress_bar=false",
        "logger=csv",
    ]  # fmt: skip
    launched, start = time.time(), time.perf_counter()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
        returncode, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as err:
        returncode, output = "timeout", f"{err.stdout or ''}{err.stderr or ''}"
    wall_s = time.perf_counter() - start
    if log is not None:
        log.write_text(" ".join(command) + "\n" + str(output))
    return {
        "launched": launched, "wall_s": wall_s, "returncode": returncode,
        "jobs": read_jobs(sweep_dir), "output_tail": str(output)[-2000:] if returncode else "",
    }  # fmt: skip


def read_jobs(sweep_dir: Path) -> list[dict]:
    """Per job dir (in job order): its number, status, seed, test metrics and train window."""
    jobs = []
    for metrics_file in Path(sweep_dir).glob("*/metrics.json"):
        job_dir = metrics_file.parent
        record = json.loads(metrics_file.read_text())
        window_file = job_dir / WINDOW_FILE
        window = json.loads(window_file.read_text()) if window_file.exists() else None
        jobs.append({
            "job": int(job_dir.name.split("_", 1)[0]), "dir": job_dir.name,
            "status": record["status"], "seed": record.get("seed"), "pid": record.get("pid"),
            "error": record.get("error"), "test_acc": record["metrics"].get("test/acc"),
            "val_acc_best": record["metrics"].get("val/acc_best"), "window": window,
        })  # fmt: skip
    return sorted(jobs, key=lambda job: job["job"])


def device_overrides(device: str, threads: int) -> list[str]:
    """Where the jobs train, and the torch threads each computes with."""
    accelerator = "gpu" if device == "cuda" else "cpu"
    return [f"trainer.accelerator={accelerator}", f"trainer.threads={threads}"]
