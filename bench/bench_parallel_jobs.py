"""Several sweep jobs at once on one device against the same jobs one at a time.

    python bench/bench_parallel_jobs.py --device cuda --jobs 2,4,8 --out jobs.json --table jobs.md
    python bench/bench_parallel_jobs.py --workloads bags --jobs 2 --steps 2 --warmup 1   # smoke

Per workload, one sweep of max(--jobs) jobs (seeds 0, 1, ...) with Hydra's basic launcher (one
job after the other in one process: what `-m` does without a launcher), then for each K in
--jobs a sweep of K jobs with `hydra/launcher=parallel hydra.launcher.n_jobs=K` (K processes at
once). The jobs are real runs (`python -m attnexp -m ...`), cut to --warmup + --steps training
batches with one validation and test batch per stage:
- bags: model=bag_attn, bags of 3, batch 128 (the embedded MNIST sample, or --data-dir's mnist/);
- imdb: model=lstm_attn, batch 128, reviews cut at 256 tokens (the embedded sample, or
  --data-dir's imdb/), as many epochs as the steps take.
Each job's torch threads: the machine's cores one at a time, cores // K for K at once.

Reported per (workload, K, launcher): the sweep's wall time (for the one-at-a-time sweep, until
its K-th job ended: measured, not extrapolated); each job's samples/s over its training window
(sweepkit.TrainWindow) and, for jobs at once, their sum (an upper bound: the windows may not
fully overlap); the aggregate: samples of all K jobs / the span from the first window's start to
the last one's end (one at a time, that span also holds the gaps between jobs); the speed-ups
for the same K jobs: one-at-a-time wall time / parallel wall time, and the aggregates' ratio.
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import sweepkit

from attnexp.runner.threads import available_cores

UNITS = {"bags": "bags/s", "imdb": "reviews/s"}


def workload_overrides(name: str, args) -> list[str]:
    """The job's command line (less seed and launcher): a small real run of each family."""
    batches = args.warmup + args.steps
    data = [f"paths.data_dir={args.data_dir}"] if args.data_dir else ["data.source=sample"]
    limits = ["trainer.limit_val_batches=1", "trainer.limit_test_batches=1"]
    if name == "bags":
        return [
            "model=bag_attn", f"data.batch_size={args.batch_size}",
            f"data.num_train_bags={args.batch_size * batches}", "trainer.max_epochs=1",
            f"trainer.limit_train_batches={batches}", "data.eval_bag_sizes=[3]",
            "data.eval_variable_max=0", *data, *limits, *args.extra,
        ]  # fmt: skip
    # epochs until max_steps (the sample has ~11 batches an epoch); the dev set checked every
    # 44 batches, as the tuned recipe checks the full set's (4 times an epoch of 176)
    return [
        "model=lstm_attn", "data=imdb", f"data.batch_size={args.batch_size}",
        "data.max_seq_len=256", "data.truncation=head", "trainer.max_epochs=1000",
        f"trainer.max_steps={batches}", *every_44_batches(batches), *data, *limits, *args.extra,
    ]  # fmt: skip


def every_44_batches(batches: int) -> list[str]:
    """Validation every 44 training batches across epochs (at least once: the best checkpoint
    is what the job tests)."""
    return [
        f"trainer.val_check_interval={min(44, batches)}",
        "trainer.check_val_every_n_epoch=null",
    ]


def seeds(count: int) -> str:
    return "seed=" + ",".join(str(i) for i in range(count))


def summarize(jobs: list[dict], wall_s: float, at_once: bool) -> dict:
    """The row of K jobs: wall time, per-job rates (and their sum when the jobs ran at once),
    the aggregate over their windows' span."""
    windows = [j["window"] for j in jobs if j["status"] == "completed" and j["window"]]
    failed = [j["dir"] for j in jobs if j["status"] != "completed" or not j["window"]]
    row = {"jobs": len(jobs), "failed": failed, "wall_s": round(wall_s, 2)}
    rates = [w["per_s"] for w in windows if w["per_s"]]
    if rates and not failed:
        span = max(w["last_wall"] for w in windows) - min(w["first_wall"] for w in windows)
        row.update(
            job_per_s_median=round(statistics.median(rates), 1),
            job_per_s=[round(r, 1) for r in rates],
            aggregate_per_s=round(sum(w["samples"] for w in windows) / span, 1),
            sum_of_job_rates=round(sum(rates), 1) if at_once else None,
        )
    return row


def one_at_a_time_rows(name: str, sweep: dict, counts: list[int]) -> list[dict]:
    """Rows for the first K jobs of the one-at-a-time sweep, K in `counts`."""
    rows = []
    for count in counts:
        jobs = sweep["jobs"][:count]
        ends = [j["window"]["finished_wall"] for j in jobs if j["window"]]
        wall_s = (max(ends) - sweep["launched"]) if len(ends) == count else sweep["wall_s"]
        rows.append({"workload": name, "launcher": "one at a time", "K": count,
                     **summarize(jobs, wall_s, at_once=False)})  # fmt: skip
    return rows


def time_left(args, started: float) -> float | None:
    """Seconds of --budget-s left (None: no budget)."""
    return None if not args.budget_s else args.budget_s - (time.perf_counter() - started)


def sweep_timeout(args, started: float) -> float:
    """A sweep ends by --budget-s (its finished jobs still count), or by --timeout-s."""
    left = time_left(args, started)
    return args.timeout_s if left is None else max(30.0, min(args.timeout_s, left))


def bench_workload(name: str, args, folder: Path, started: float, rows: list, save) -> None:
    """Appends the workload's rows to `rows`, calling `save()` after each sweep (a kill from
    outside keeps what was measured)."""
    cores = available_cores()
    common = [*workload_overrides(name, args)]
    counts = sorted(set(args.jobs))
    skipped = {"error": "skipped: budget"}
    if (time_left(args, started) or 1) <= 0:
        rows += [{"workload": name, "launcher": "one at a time", "K": k, **skipped} for k in counts]
        return
    sweep_dir = folder / f"{name}-one-at-a-time"
    sequential = sweepkit.run_sweep(
        [seeds(max(counts)), *common, *sweepkit.device_overrides(args.device, cores)],
        sweep_dir, args.warmup, sweep_timeout(args, started), folder / f"{sweep_dir.name}.log",
    )  # fmt: skip
    alone = one_at_a_time_rows(name, sequential, sorted({1, *counts}))
    if sequential["returncode"]:
        alone[-1]["error"] = f"exit {sequential['returncode']}: {sequential['output_tail']}"
    rows += alone
    save()
    for count in sorted(counts, reverse=True):  # the largest first: the one most asked for
        if (time_left(args, started) or 1) <= 0:
            rows.append({"workload": name, "launcher": "parallel", "K": count, **skipped})
            continue
        sweep_dir = folder / f"{name}-parallel-{count}"
        launcher = ["hydra/launcher=parallel", f"hydra.launcher.n_jobs={count}"]
        threads = max(1, cores // count)
        parallel = sweepkit.run_sweep(
            [*launcher, seeds(count), *common, *sweepkit.device_overrides(args.device, threads)],
            sweep_dir, args.warmup, sweep_timeout(args, started), folder / f"{sweep_dir.name}.log",
        )  # fmt: skip
        row = {"workload": name, "launcher": "parallel", "K": count, "threads_per_job": threads,
               **summarize(parallel["jobs"], parallel["wall_s"], at_once=True)}  # fmt: skip
        if parallel["returncode"]:
            row["error"] = f"exit {parallel['returncode']}: {parallel['output_tail']}"
        one = next(r for r in alone if r["K"] == count)
        if "error" not in one and "error" not in row:
            row["speedup_wall"] = round(one["wall_s"] / row["wall_s"], 2)
        if "aggregate_per_s" in row and "aggregate_per_s" in one:
            row["speedup_aggregate"] = round(row["aggregate_per_s"] / one["aggregate_per_s"], 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
        save()


def markdown(rows: list[dict], device: str, args) -> str:
    lines = [
        f"Sweep jobs on {device}: {args.steps} timed training batches per job after {args.warmup} "
        f"(batch {args.batch_size}); wall = the sweep's, from its launch; aggregate = all jobs' "
        "samples / the span of their training windows",
        "",
        "| workload | launcher | K jobs | wall s | job samples/s (median) | sum of job rates "
        "| aggregate samples/s | speed-up: wall | speed-up: aggregate |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        unit = UNITS[r["workload"]]
        if "error" in r or r.get("failed"):
            why = r.get("error") or f"failed jobs: {', '.join(r['failed'])}"
            lines.append(f"| {r['workload']} | {r['launcher']} | {r['K']} | failed: "
                         f"{why[:80]} | | | | | |")  # fmt: skip
            continue
        summed = f"{r['sum_of_job_rates']:,.0f} {unit}" if r["sum_of_job_rates"] else ""
        lines.append(
            f"| {r['workload']} | {r['launcher']} | {r['K']} | {r['wall_s']:.1f} | "
            f"{r['job_per_s_median']:,.0f} {unit} | {summed} | "
            f"{r['aggregate_per_s']:,.0f} {unit} | "
            f"{r.get('speedup_wall', '')} | {r.get('speedup_aggregate', '')} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--workloads", default="bags,imdb")
    parser.add_argument("--jobs", default="2,4,8", help="K: jobs at once, comma-separated")
    parser.add_argument("--data-dir", default=None, help="folder holding mnist/ and imdb/")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--budget-s", type=float, default=None, help="skip sweeps past this")
    parser.add_argument("--timeout-s", type=float, default=600, help="per sweep")
    parser.add_argument("--extra", nargs="*", default=[], help="more overrides for every job")
    parser.add_argument("--keep", default=None, help="keep the sweep dirs and logs here")
    parser.add_argument("--out", default=None, help="JSON results")
    parser.add_argument("--table", default=None, help="markdown table")
    args = parser.parse_args()
    args.jobs = [int(k) for k in args.jobs.split(",")]
    if min(args.jobs) < 1:
        raise SystemExit(f"--jobs {args.jobs}: each K must be at least 1")
    device = "CPU"
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: torch sees no CUDA device here; use --device cpu")
        device = torch.cuda.get_device_name()
    folder = Path(args.keep or tempfile.mkdtemp(prefix="parallel-jobs-"))
    folder.mkdir(parents=True, exist_ok=True)
    started, rows = time.perf_counter(), []

    def save() -> str:
        result = {
            "device": device, "cores": available_cores(), "warmup": args.warmup,
            "steps": args.steps, "batch_size": args.batch_size, "rows": rows,
            "data": args.data_dir or "embedded samples", "sweeps": str(folder),
            "wall_s": round(time.perf_counter() - started, 1),
        }  # fmt: skip
        table = markdown(rows, device, args)
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        if args.table:
            Path(args.table).write_text(table)
        return table

    for name in args.workloads.split(","):
        bench_workload(name, args, folder, started, rows, save)
    print(save())


if __name__ == "__main__":
    main()
